#!/usr/bin/env bash
# Host tuning before a timed run: the settings AMD's runtime_tunables.sh applies, made idempotent, reported,
# root-aware and undone afterwards. Each setting is written only where that is possible (root, passwordless
# sudo, a writable file) and only when it differs from the target; before/after values go to
# LOGDIR/runtime_tunables_<timestamp>.txt, one line per setting. Without root it says what it skipped and
# exits 0: the run is still valid, only possibly slower. The page cache is dropped by run_with_docker.sh.
# Before a file is first changed, its value is kept in ROOT/run/mlperf_runtime_tunables.saved (/run is
# emptied at boot, as the kernel's settings are reset): later calls keep the value found first, and
# --restore writes the kept values back, reports them and removes the file. The launchers restore at the end
# of their runs and when stopped, so the host is left as it was found.
#
# Usage: runtime_tunables.sh LOGDIR                 apply the settings, report to LOGDIR (needs root or sudo)
#        runtime_tunables.sh --dry-run [LOGDIR]     report what would change; change nothing
#        runtime_tunables.sh --restore LOGDIR       put back every setting that earlier calls changed
#        runtime_tunables.sh -h | --help            this text; changes nothing
#   TUNABLES_ROOT   prefix of /proc, /sys and /run (default /; the tests point it at a fake tree)
#   IDLE_MAX_STATE  deepest CPU idle state left enabled (default 1: states 2+ are disabled, which is what
#                   AMD's `cpupower idle-set -d 2` does on EPYC; written through sysfs, so no cpupower needed)
#   THP_ENABLED, THP_DEFRAG  transparent huge pages modes (default always, as AMD sets both; or madvise)
set -euo pipefail

die() {
  echo "runtime_tunables.sh: error: $*" >&2
  exit 2
}

usage() { # the comment block at the top
  sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
}

# The arguments, all read before anything is looked at or written: an argument not listed above stops here.
mode=apply logdir=''
while (($# > 0)); do
  case $1 in
    -h | --help) usage && exit 0 ;;
    --dry-run | --restore)
      [[ ${mode} == apply ]] || die "${1} and --${mode}: give one of them"
      mode=${1#--}
      ;;
    --) shift && break ;;
    -*) die "unknown option ${1} (runtime_tunables.sh --help lists them); nothing was changed" ;;
    *)
      [[ -z ${logdir} ]] || die "one LOGDIR expected, got ${logdir} and ${1}; nothing was changed"
      logdir=$1
      ;;
  esac
  shift
done
if (($# > 0)); then
  [[ -z ${logdir} && $# == 1 ]] || die "one LOGDIR expected, got: ${logdir:+${logdir} }$*; nothing was changed"
  logdir=$1
fi
if [[ -z ${logdir} && ${mode} != dry-run ]]; then
  echo "usage: runtime_tunables.sh [--dry-run | --restore] LOGDIR   (--help says more)" >&2
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
saved_file=${root}/run/mlperf_runtime_tunables.saved
# The files a saved value may be restored to (relative to root), and what a value may look like.
tunable_files='sys/devices/system/cpu/cpu[0-9]+/(cpufreq/scaling_governor|cpuidle/state[0-9]+/disable)'
tunable_files+='|proc/sys/kernel/(nmi_watchdog|numa_balancing|randomize_va_space)'
tunable_files+='|sys/kernel/mm/transparent_hugepage/(enabled|defrag)'
saved_line="^([A-Za-z0-9_+]+)"$'\t'"(${tunable_files})"$'\t'"([A-Za-z0-9_+-]+)$"

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

# The saved values: the valid lines of the saved file, one "setting<TAB>file<TAB>value" each (file relative
# to root); any other line is named and left out, so a damaged or altered file writes nothing unexpected.
declare -A kept=()
saved=()
if [[ -e ${saved_file} ]]; then
  mapfile -t lines <"${saved_file}"
  for line in "${lines[@]}"; do
    if [[ ${line} =~ ${saved_line} ]]; then
      saved+=("${line}") && kept[${BASH_REMATCH[2]}]=1
    else
      echo "runtime_tunables.sh: ${saved_file}: not a saved tunable, ignored: ${line}" >&2
    fi
  done
fi

# keep_first NAME FILE: add FILE's present value to the saved file, unless a value of FILE is kept already.
keep_first() {
  local rel=${2#"${root}/"} line
  [[ -z ${kept[${rel}]:-} ]] || return 0
  line=$(printf '%s\t%s\t%s' "$1" "${rel}" "$(read_value "$2")")
  [[ ${line} =~ ${saved_line} ]] || return 1 # a value that could not be restored: not changed either
  if [[ ${privilege} == sudo && ! -w ${root}/run ]]; then
    printf '%s\n' "${line}" | sudo -n tee -a "${saved_file}" >/dev/null || return 1
  else
    mkdir -p "${root}/run" && printf '%s\n' "${line}" >>"${saved_file}" || return 1
  fi
  kept[${rel}]=1
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
  elif [[ ${mode} == dry-run ]]; then
    status="skipped:dry-run(would-set-${target})"
  else
    for f in "${files[@]}"; do
      [[ $(read_value "${f}") == "${target}" ]] && continue
      if [[ ! -w ${f} && ${privilege} != sudo ]]; then
        status=$(why_not_written "${f}")
      elif ! keep_first "${name}" "${f}"; then
        status=skipped:cannot-keep-value # changed only where it can be put back
      else
        write_value "${f}" "${target}" 2>/dev/null || status=$(why_not_written "${f}")
      fi
    done
  fi
  after=$(summarize "${files[@]}")
  if [[ ${status} == applied && ${after} != "${target}" ]]; then status=skipped:write-failed; fi
  report+=("${name} ${before} ${after} ${status}")
}

# Write back every saved value, one report line per setting; the saved file goes once all are back.
restore() {
  local line name rel value before after status failed=0 names=()
  local -A by_setting=()
  for line in "${saved[@]}"; do
    IFS=$'\t' read -r name rel value <<<"${line}"
    [[ -n ${by_setting[${name}]:-} ]] || names+=("${name}")
    by_setting[${name}]+="${rel}"$'\t'"${value}"$'\n'
  done
  for name in "${names[@]}"; do
    local paths=()
    while IFS=$'\t' read -r rel value; do paths+=("${root}/${rel}"); done <<<"${by_setting[${name}]%$'\n'}"
    before=$(summarize "${paths[@]}")
    status=restored
    while IFS=$'\t' read -r rel value; do
      if [[ ! -e ${root}/${rel} ]]; then
        status=skipped:absent
      elif [[ $(read_value "${root}/${rel}") != "${value}" ]]; then
        write_value "${root}/${rel}" "${value}" 2>/dev/null || status=$(why_not_written "${root}/${rel}")
      fi
    done <<<"${by_setting[${name}]%$'\n'}"
    after=$(summarize "${paths[@]}")
    if [[ ${status} != restored ]]; then failed=$((failed + 1)); fi
    report+=("${name} ${before} ${after} ${status}")
  done
  if ((failed > 0)); then
    echo "runtime_tunables.sh: ${failed} setting(s) could not be put back; ${saved_file} keeps them" >&2
    return 1
  fi
  if [[ ${privilege} == sudo && ! -w ${root}/run ]]; then
    sudo -n rm -f -- "${saved_file}"
  else
    rm -f -- "${saved_file}"
  fi
}

status=0
if [[ ${mode} == restore ]]; then
  if [[ ! -e ${saved_file} ]]; then
    echo "runtime_tunables.sh: nothing to restore (no ${saved_file}: no setting was changed)"
    exit 0
  fi
  restore || status=1
else
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
fi

table() {
  echo "# runtime_tunables.sh $(date -Is) host=$(hostname) user=$(id -un) privilege=${privilege}" \
    "mode=${mode} root=${TUNABLES_ROOT}"
  printf '%-26s %-16s %-16s %s\n' setting before after status
  local line
  for line in "${report[@]}"; do
    # shellcheck disable=SC2086  # the fields are single words by construction
    printf '%-26s %-16s %-16s %s\n' ${line}
  done
}

table
if [[ -n ${logdir} ]]; then
  mkdir -p -- "${logdir}"
  out="${logdir}/runtime_tunables_$(date +%Y%m%d_%H%M%S).txt"
  n=1
  while [[ -e ${out} ]]; do # two runs in one second: keep both reports
    out="${logdir}/runtime_tunables_$(date +%Y%m%d_%H%M%S)_$((n++)).txt"
  done
  if table >"${out}"; then
    echo "runtime_tunables.sh: report written to ${out}"
  else
    echo "runtime_tunables.sh: could not write the report ${out} (the table is above)" >&2
    status=1
  fi
fi
skipped=0
for line in "${report[@]}"; do
  if [[ ${line} =~ \ skipped:(no-root|read-only|write-failed|cannot-keep-value) ]]; then
    skipped=$((skipped + 1))
  fi
done
if [[ ${mode} != restore ]] && ((skipped > 0)); then
  echo "runtime_tunables.sh: ${skipped} setting(s) could not be applied (privilege=${privilege}):" \
    "runs stay valid but may be slower; run as root or with passwordless sudo to apply them" >&2
fi
exit "${status}"
