# shellcheck shell=bash
# What run_with_docker.sh (one node) and run.sub (SLURM) share: reading the config, the NEXP loop (host
# tuning, page cache drop, one timed run tee'd to LOGDIR/<BENCHMARK>_<DGXSYSTEM>_<i>.log numbered on from the
# highest index already there, its compliance check) and the final scoring. Sourced, never run.
#
# The launcher sets RUNNER (its name, for messages) and REPO_DIR (the repository root), calls load_config and
# config_env, then defines where its steps run and calls preflight and run_experiments:
#   on_each_node COMMAND ...                      once on the host of every node (runtime tunables, cache drop)
#   run_inside [NAME=VALUE ...] -- COMMAND ...    once, where training runs (container or host), from the code
#                                                 folder: the preflight, the compliance checks, the scoring
#   run_training [NAME=VALUE ...] -- COMMAND ...  the timed run: every node, from the code folder
#   cleanup                                       on exit, whatever the reason (removes containers)
# and sets _py (the Python of run_inside) and _in_logdir (LOGDIR as run_inside sees it).
# shellcheck disable=SC2154  # _py and _in_logdir: set by the launcher
# Exit status of run_experiments: 0 when every run converged and passed its checks, 1 otherwise (each
# failure listed); die exits 2; SIGINT/SIGTERM exit 130/143, keeping the stopped run's partial log.

die() {
  echo "${RUNNER}: error: $*" >&2
  exit 2
}

# The config sourced by the user (DGXSYSTEM set), or here from CONFIG_FILE; the launchers' defaults and
# checks. Sets CONFIG_FILE, _config_file (its full path) and _prefix (<BENCHMARK>_<DGXSYSTEM>).
load_config() {
  local system
  if [[ -z ${DGXSYSTEM:-} ]]; then
    [[ -n ${CONFIG_FILE:-} ]] ||
      die "no config: 'source configs/<benchmark>/config_<SYSTEM>.sh' first, or set CONFIG_FILE"
    [[ -f ${CONFIG_FILE} ]] || die "CONFIG_FILE=${CONFIG_FILE}: no such file"
    set +u
    # shellcheck source=/dev/null
    source "${CONFIG_FILE}"
    set -u
    system=$(basename "${CONFIG_FILE}" .sh)
    export DGXSYSTEM="${DGXSYSTEM:-${system#config_}}"
  elif [[ -n ${CONFIG_FILE:-} ]]; then
    system=$(basename "${CONFIG_FILE}" .sh)
    [[ ${system#config_} == "${DGXSYSTEM}" ]] || die "CONFIG_FILE=${CONFIG_FILE} is not the config of" \
      "DGXSYSTEM=${DGXSYSTEM} sourced in this shell: source ${CONFIG_FILE}, or unset DGXSYSTEM"
  fi
  : "${BENCHMARK:?BENCHMARK not set: the config exports it (bert, llama31_8b or llama2_70b_lora)}"
  local default_config="${REPO_DIR}/configs/${BENCHMARK}/config_${DGXSYSTEM}.sh"
  [[ -f ${default_config} ]] || default_config="./config_${DGXSYSTEM}.sh"
  : "${CONFIG_FILE:=${default_config}}"
  : "${DATADIR:?DATADIR not set: export DATADIR=<the prepared data folder>}"
  : "${LOGDIR:=./results}"
  : "${NEXP:=1}"
  [[ -z ${SEED:-} || ${SEED} =~ ^[0-9]+$ ]] || die "SEED=${SEED}: not a non-negative integer"
  : "${CLEAR_CACHES:=1}"
  : "${CONT_NAME:=mlperf_${BENCHMARK}}"
  : "${PYTHON:=python3}"                        # CONTAINER_RUNTIME=none only; the image's python3 otherwise
  : "${DROPCACHE_CMD:=sysctl vm.drop_caches=3}" # run through sudo -n when not root
  [[ -f ${CONFIG_FILE} ]] || die "CONFIG_FILE=${CONFIG_FILE}: no such file"
  [[ -d ${DATADIR} ]] || die "DATADIR=${DATADIR}: no such directory (the prepared data folder)"
  [[ ${NEXP} =~ ^[1-9][0-9]*$ ]] || die "NEXP=${NEXP}: expected a positive whole number"
  [[ ${CLEAR_CACHES} =~ ^[01]$ ]] || die "CLEAR_CACHES=${CLEAR_CACHES}: expected 0 or 1"
  mkdir -p "${LOGDIR}"
  LOGDIR=$(cd "${LOGDIR}" && pwd)
  DATADIR=$(cd "${DATADIR}" && pwd)
  _config_file=$(readlink -f "${CONFIG_FILE}")
  _prefix="${BENCHMARK}_${DGXSYSTEM}"
}

# The names the config exports go to the container by name (the value comes from this shell).
config_env() {
  local name names missing=()
  # shellcheck disable=SC2016  # $0 is expanded by the clean inner shell, not here
  names=$(env -i bash -c '. "$0" && compgen -e' "${_config_file}" | grep -E -v '^(PWD|SHLVL|_)$') ||
    die "${_config_file} exports no variables (or fails when sourced)"
  mapfile -t _config_env <<<"${names}"
  echo "Config ${_config_file}: ${_config_env[*]}"
  export CONFIG_VARS="${_config_env[*]}"
  for name in "${_config_env[@]}"; do printenv "${name}" >/dev/null || missing+=("${name}"); done
  ((${#missing[@]} == 0)) || die "not exported in this shell: ${missing[*]} (source ${_config_file})"
  # Set by the launcher itself, per container or per run: never copied from this shell.
  local -A seen=([DATADIR]=1 [LOGDIR]=1 [CONFIG_VARS]=1 [RUN_TAG]=1 [SEED]=1 [CLEAR_CACHES]=1)
  _pass_env=()
  for name in "${_config_env[@]}" BENCHMARK DGXSYSTEM DGXNNODES DGXNGPU; do
    [[ -z ${seen[${name}]:-} ]] || continue
    seen[${name}]=1
    _pass_env+=("${name}")
  done
}

preflight() {
  echo "Preflight: ${_py} -m training.preflight"
  local rc=0
  run_inside -- "${_py}" -m training.preflight || rc=$?
  ((rc == 0)) || die "preflight failed (exit ${rc}): fix what it names above; no run was started"
}

next_index() { # 1 + the highest <prefix>_<n>.log already in LOGDIR
  local f n max=0
  for f in "${LOGDIR}/${_prefix}"_*.log; do
    n=${f#"${LOGDIR}/${_prefix}_"} && n=${n%.log}
    if [[ ${n} =~ ^[0-9]+$ ]] && ((10#${n} > max)); then max=$((10#${n})); fi
  done
  echo $((max + 1))
}

drop_caches() { # on every node
  local cmd
  read -ra cmd <<<"${DROPCACHE_CMD}"
  ((EUID == 0)) || cmd=(sudo -n "${cmd[@]}")
  # shellcheck disable=SC2016  # "$@" is the inner shell's
  on_each_node bash -c 'sync && "$@"' drop_caches "${cmd[@]}"
}

run_trial() { # run_trial K TAG SEED: host tuning, cache drop, one timed run; prints everything for the log
  local cleared=0
  echo "Beginning trial $1 of ${NEXP}: RUN_TAG=$2 SEED=$3"
  on_each_node bash "${REPO_DIR}/runtime_tunables.sh" "${LOGDIR}" ||
    echo "WARNING: runtime_tunables.sh failed (exit $?)" >&2
  if ((CLEAR_CACHES == 0)); then
    echo "CLEAR_CACHES=0: page cache not dropped"
  elif drop_caches; then
    cleared=1 && echo "Clear page cache"
  else
    echo "WARNING: could not drop the page cache (${DROPCACHE_CMD} needs root or passwordless sudo):" \
      "CLEAR_CACHES=0 for this run" >&2
  fi
  run_training "RUN_TAG=$2" "SEED=$3" "CLEAR_CACHES=${cleared}" -- bash training/run_and_time.sh
}

describe_exit() {
  case $1 in
    1) echo "not converged" ;;
    2) echo "config or data error" ;;
    *) echo "crashed" ;;
  esac
}

_run_pid=
_on_exit() {
  local rc=$?
  cleanup
  exit "${rc}"
}
_on_signal() { # stop the run in progress; its log keeps what it wrote; _on_exit cleans up
  echo "${RUNNER}: caught SIG$1, stopping" >&2
  if [[ -n ${_run_pid} ]]; then
    kill -TERM -- "-${_run_pid}" 2>/dev/null || echo "(the run had already ended)" >&2
    wait "${_run_pid}" || echo "run stopped (exit $?); partial log: ${_log}" >&2
    echo "${RUNNER}: run stopped by SIG$1" >>"${_log}"
  fi
  exit "$2"
}
install_traps() {
  trap _on_exit EXIT
  trap '_on_signal INT 130' INT
  trap '_on_signal TERM 143' TERM
}

# The NEXP runs, each with its compliance check, then the score of LOGDIR; exits with the verdict.
run_experiments() {
  local k tag seed rc failures=()
  local first
  first=$(next_index)
  for ((k = 1; k <= NEXP; k++)); do
    tag="${_prefix}_$((first + k - 1))"
    _log="${LOGDIR}/${tag}.log"
    if [[ -n ${SEED:-} ]]; then # a fixed first seed (to repeat runs): SEED, SEED+1, ... for the trials
      seed=$((SEED + k - 1))
    else
      seed=$(($(od -An -N4 -tu4 /dev/urandom) & 0x7fffffff))
    fi
    # The trial runs as its own process group, so a signal handler can stop all of it. The subshell and tee
    # ignore the stop signal: tee keeps writing the run's last words to the log until the run has ended.
    set -m
    (
      trap '' INT TERM
      set +e
      { trap - INT TERM && run_trial "${k}" "${tag}" "${seed}"; } 2>&1 | tee "${_log}"
      exit "${PIPESTATUS[0]}"
    ) &
    _run_pid=$!
    set +m
    if wait "${_run_pid}"; then rc=0; else rc=$?; fi
    _run_pid=
    ((rc == 0)) || failures+=("trial ${k} (${_log}): exit ${rc}, $(describe_exit "${rc}")")
    run_inside -- "${_py}" -m training.scoring.compliance "${_in_logdir}/${tag}.log" ||
      failures+=("trial ${k} (${_log}): compliance check failed (exit $?), see ${LOGDIR}/${tag}.compliance.txt")
  done

  echo "Scoring: ${_py} -m training.scoring ${_in_logdir}"
  run_inside -- "${_py}" -m training.scoring "${_in_logdir}" ||
    failures+=("scoring of ${LOGDIR} failed (exit $?), see ${LOGDIR}/summary.md")
  if ((${#failures[@]} > 0)); then
    echo "${RUNNER}: ${#failures[@]} problem(s):" >&2
    printf '  - %s\n' "${failures[@]}" >&2
    exit 1
  fi
  echo "${RUNNER}: ${NEXP} run(s) converged and passed compliance; summary in ${LOGDIR}/summary.md"
}
