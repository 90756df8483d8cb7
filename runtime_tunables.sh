#!/usr/bin/env bash
# Host tuning before a timed run: the settings AMD's runtime_tunables.sh applies, made idempotent, reported
# and root-aware. Each setting is written only where that is possible (root, passwordless sudo, a writable
# file) and only when it differs from the target; before/after values go to
# LOGDIR/runtime_tunables_<timestamp>.txt, one line per setting. Without root it says what it skipped and
# exits 0: the run is still valid, only possibly slower. The page cache is dropped by run_with_docker.sh.
#
# Usage: runtime_tunables.sh [--dry-run] LOGDIR      (--dry-run: report only; LOGDIR optional then)
#   TUNABLES_ROOT   prefix of /proc and /sys (default /; the tests point it at a fake tree)
#   IDLE_MAX_STATE  deepest CPU idle state left enabled (default 1: states 2+ are disabled, which is what
#                   AMD's `cpupower idle-set -d 2` does on EPYC; written through sysfs, so no cpupower needed)
#   THP_ENABLED, THP_DEFRAG  transparent huge pages modes (default always, as AMD sets both; or madvise)
set -euo pipefail

die() {
  echo "runtime_tunables.sh: error: $*" >&2
  exit 2
}

dry_run=0
if [[ ${1:-} == --dry-run ]]; then
  dry_run=1
  shift
fi
logdir=${1:-}
if [[ -z ${logdir} ]] && ((!dry_run)); then
  echo "usage: runtime_tunables.sh [--dry-run] LOGDIR" >&2
  exit 2
fi
: "${TUNABLES_ROOT:=/}"
: "${IDLE_MAX_STATE:=1}"
: "${THP_ENABLED:=always}"
: "${THP_DEFRAG:=always}"
# Checked before use: IDLE_MAX_STATE goes into arithmetic, the modes into kernel files.
[[ ${IDLE_MAX_STATE} =~ ^[0-9]{1,2}$ ]] || die "IDLE_MAX_STATE=${IDLE_MAX_STATE}: expected a whole number"
case ${THP_ENABLED} in
  always | madvise | never) ;;
  *) die "THP_ENABLED=${THP_ENABLED}: expected always, madvise or never" ;;
esac
case ${THP_DEFRAG} in
  always | defer | defer+madvise | madvise | never) ;;
  *) die "THP_DEFRAG=${THP_DEFRAG}: expected always, defer, defer+madvise, madvise or never" ;;
esac
root=${TUNABLES_ROOT%/}

# How this user can write kernel settings: as root, through passwordless sudo, or not at all.
if ((EUID == 0)); then
  privilege=root
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  privilege=sudo
else
  privilege=none
fi

# The value a tunable file holds: the [bracketed] choice for THP-style files, else the content.
read_value() {
  local content
  content=$(<"$1")
  if [[ ${content} =~ \[([^]]+)\] ]]; then echo "${BASH_REMATCH[1]}"; else echo "${content}"; fi
}

# The distinct values of several files (one per CPU, say), comma-joined: "0" or "0,1".
summarize() {
  local f
  for f in "$@"; do read_value "${f}"; done | sort -u | paste -sd, -
}

write_value() {
  if [[ -w $1 ]]; then
    printf '%s\n' "$2" >"$1"
  elif [[ ${privilege} == sudo ]]; then
    printf '%s\n' "$2" | sudo -n tee "$1" >/dev/null
  else
    return 1
  fi
}

why_not_written() {
  if [[ -w $1 ]]; then
    echo "skipped:write-failed"
  elif [[ ${privilege} == none ]]; then
    echo "skipped:no-root"
  elif [[ ${privilege} == root ]]; then
    echo "skipped:read-only"
  else
    echo "skipped:write-failed"
  fi
}

report=()
# tune NAME TARGET FILE...: bring every FILE to TARGET, adding one line to the report.
tune() {
  local name=$1 target=$2 f before after status=applied
  shift 2
  local files=()
  for f in "$@"; do
    if [[ -e ${f} ]]; then files+=("${f}"); fi
  done
  if ((${#files[@]} == 0)); then
    report+=("${name} - - skipped:absent")
    return
  fi
  before=$(summarize "${files[@]}")
  if [[ ${before} == "${target}" ]]; then
    status=skipped:already-set
  elif ((dry_run)); then
    status="skipped:dry-run(would-set-${target})"
  else
    for f in "${files[@]}"; do
      [[ $(read_value "${f}") == "${target}" ]] && continue
      write_value "${f}" "${target}" 2>/dev/null || status=$(why_not_written "${f}")
    done
  fi
  after=$(summarize "${files[@]}")
  if [[ ${status} == applied && ${after} != "${target}" ]]; then status=skipped:write-failed; fi
  report+=("${name} ${before} ${after} ${status}")
}

cpu=${root}/sys/devices/system/cpu
governors=("${cpu}"/cpu[0-9]*/cpufreq/scaling_governor)
available=${cpu}/cpu0/cpufreq/scaling_available_governors
if [[ -e ${governors[0]} && -r ${available} && " $(<"${available}") " != *" performance "* ]]; then
  current=$(summarize "${governors[@]}")
  report+=("cpu_governor ${current} ${current} skipped:unsupported(no-performance-governor)")
else
  tune cpu_governor performance "${governors[@]}"
fi

deep_states=()
for f in "${cpu}"/cpu[0-9]*/cpuidle/state[0-9]*/disable; do
  state=${f%/disable}
  state=${state##*/state}
  if [[ ${state} =~ ^[0-9]+$ ]] && ((state > IDLE_MAX_STATE)); then deep_states+=("${f}"); fi
done
tune "cpuidle_state${IDLE_MAX_STATE}+_disabled" 1 "${deep_states[@]}"

tune nmi_watchdog 0 "${root}/proc/sys/kernel/nmi_watchdog"
tune numa_balancing 0 "${root}/proc/sys/kernel/numa_balancing"
tune randomize_va_space 0 "${root}/proc/sys/kernel/randomize_va_space"
tune thp_enabled "${THP_ENABLED}" "${root}/sys/kernel/mm/transparent_hugepage/enabled"
tune thp_defrag "${THP_DEFRAG}" "${root}/sys/kernel/mm/transparent_hugepage/defrag"

table() {
  echo "# runtime_tunables.sh $(date -Is) host=$(hostname) user=$(id -un) privilege=${privilege}" \
    "dry_run=${dry_run} root=${TUNABLES_ROOT}"
  printf '%-26s %-16s %-16s %s\n' setting before after status
  local line
  for line in "${report[@]}"; do
    # shellcheck disable=SC2086  # the fields are single words by construction
    printf '%-26s %-16s %-16s %s\n' ${line}
  done
}

table
if [[ -n ${logdir} ]]; then
  mkdir -p "${logdir}"
  out="${logdir}/runtime_tunables_$(date +%Y%m%d_%H%M%S).txt"
  n=1
  while [[ -e ${out} ]]; do # two runs in one second: keep both reports
    out="${logdir}/runtime_tunables_$(date +%Y%m%d_%H%M%S)_$((n++)).txt"
  done
  table >"${out}"
  echo "runtime_tunables.sh: report written to ${out}"
fi
skipped=0
for line in "${report[@]}"; do
  if [[ ${line} =~ \ skipped:(no-root|read-only|write-failed) ]]; then skipped=$((skipped + 1)); fi
done
if ((skipped > 0)); then
  echo "runtime_tunables.sh: ${skipped} setting(s) could not be applied (privilege=${privilege}):" \
    "runs stay valid but may be slower; run as root or with passwordless sudo to apply them" >&2
fi
exit 0
