#!/usr/bin/env bash
# Host side of one node: config -> one long-lived container -> preflight -> NEXP x (runtime tunables, page
# cache drop, timed run, compliance check) -> scoring. Each run's log is LOGDIR/<BENCHMARK>_<DGXSYSTEM>_<i>.log,
# numbered on from the highest index already there, so nothing is overwritten.
#   source configs/bert/config_MI300X_1x8x48.sh
#   export CONT=mlperf/bert DATADIR=/data/bert_data NEXP=10 LOGDIR=./results
#   bash run_with_docker.sh
# CONTAINER_RUNTIME=none runs the in-container steps on this host, from the repo root, with $PYTHON.
# Exit status: 0 when every run converged and passed its checks, 1 otherwise (each failure is listed),
# 2 for a setup error, 130/143 when stopped by SIGINT/SIGTERM (the stopped run's partial log is kept).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
PATH="${PATH}:/usr/sbin:/sbin" # sysctl
die() {
  echo "run_with_docker.sh: error: $*" >&2
  exit 2
}

# The config: sourced by the user (DGXSYSTEM set), or here from CONFIG_FILE.
if [[ -z ${DGXSYSTEM:-} ]]; then
  [[ -n ${CONFIG_FILE:-} ]] ||
    die "no config: 'source configs/<benchmark>/config_<SYSTEM>.sh' first, or set CONFIG_FILE"
  [[ -f ${CONFIG_FILE} ]] || die "CONFIG_FILE=${CONFIG_FILE}: no such file"
  set +u
  # shellcheck source=/dev/null
  source "${CONFIG_FILE}"
  set -u
  _system=$(basename "${CONFIG_FILE}" .sh)
  export DGXSYSTEM="${DGXSYSTEM:-${_system#config_}}"
elif [[ -n ${CONFIG_FILE:-} ]]; then
  _system=$(basename "${CONFIG_FILE}" .sh)
  [[ ${_system#config_} == "${DGXSYSTEM}" ]] || die "CONFIG_FILE=${CONFIG_FILE} is not the config of" \
    "DGXSYSTEM=${DGXSYSTEM} sourced in this shell: source ${CONFIG_FILE}, or unset DGXSYSTEM"
fi
: "${BENCHMARK:?BENCHMARK not set: the config exports it (bert, llama31_8b or llama2_70b_lora)}"
_default_config="${SCRIPT_DIR}/configs/${BENCHMARK}/config_${DGXSYSTEM}.sh"
[[ -f ${_default_config} ]] || _default_config="./config_${DGXSYSTEM}.sh"
: "${CONFIG_FILE:=${_default_config}}"
: "${CONTAINER_RUNTIME:=docker}"
: "${CONT:=}"
: "${DATADIR:?DATADIR not set: export DATADIR=<the prepared data folder>}"
: "${LOGDIR:=./results}"
: "${NEXP:=1}"
: "${CLEAR_CACHES:=1}"
: "${CONT_NAME:=mlperf_${BENCHMARK}}"
: "${PYTHON:=python3}"                            # CONTAINER_RUNTIME=none only; the image's python3 otherwise
: "${DROPCACHE_CMD:=sysctl vm.drop_caches=3}"     # run through sudo -n when not root

case ${CONTAINER_RUNTIME} in
  docker | podman) [[ -n ${CONT} ]] || die "CONT not set: export CONT=<image> (or CONTAINER_RUNTIME=none)" ;;
  none) ;;
  *) die "CONTAINER_RUNTIME=${CONTAINER_RUNTIME}: expected docker, podman or none" ;;
esac
[[ -f ${CONFIG_FILE} ]] || die "CONFIG_FILE=${CONFIG_FILE}: no such file"
[[ -d ${DATADIR} ]] || die "DATADIR=${DATADIR}: no such directory (the prepared data folder)"
[[ ${NEXP} =~ ^[1-9][0-9]*$ ]] || die "NEXP=${NEXP}: expected a positive whole number"
[[ ${CLEAR_CACHES} =~ ^[01]$ ]] || die "CLEAR_CACHES=${CLEAR_CACHES}: expected 0 or 1"
[[ ${DGXNNODES:-1} == 1 ]] ||
  die "DGXNNODES=${DGXNNODES}: this script runs one node; use sbatch -N ${DGXNNODES} run.sub"
mkdir -p "${LOGDIR}"
LOGDIR=$(cd "${LOGDIR}" && pwd)
DATADIR=$(cd "${DATADIR}" && pwd)
_config_file=$(readlink -f "${CONFIG_FILE}")
readonly _config_file _cont_name=${CONT_NAME} _prefix="${BENCHMARK}_${DGXSYSTEM}"
cd "${SCRIPT_DIR}"

# The names the config exports go to the container by name (--env=NAME: the value comes from this shell).
# shellcheck disable=SC2016  # $0 is expanded by the clean inner shell, not here
_names=$(env -i bash -c '. "$0" && compgen -e' "${_config_file}" | grep -E -v '^(PWD|SHLVL|_)$') ||
  die "${_config_file} exports no variables (or fails when sourced)"
mapfile -t _config_env <<<"${_names}"
echo "Config ${_config_file}: ${_config_env[*]}"
export CONFIG_VARS="${_config_env[*]}"
_missing=()
for _name in "${_config_env[@]}"; do printenv "${_name}" >/dev/null || _missing+=("${_name}"); done
((${#_missing[@]} == 0)) || die "not exported in this shell: ${_missing[*]} (source ${_config_file})"
declare -A _own=([DATADIR]=1 [LOGDIR]=1 [CONFIG_VARS]=1 [RUN_TAG]=1 [SEED]=1 [CLEAR_CACHES]=1)
_env_flags=()
for _name in "${_config_env[@]}" BENCHMARK DGXSYSTEM DGXNNODES DGXNGPU; do
  [[ -z ${_own[${_name}]:-} ]] || continue
  _own[${_name}]=1
  _env_flags+=("--env=${_name}")
done

# Where the training steps run: in the container, or (none) right here.
run_inside() { # run_inside [NAME=VALUE ...] -- COMMAND ...
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1") && shift; done
  shift
  if [[ ${CONTAINER_RUNTIME} == none ]]; then
    env "${envs[@]}" "$@"
  else
    "${CONTAINER_RUNTIME}" exec "${envs[@]/#/--env=}" "${_cont_name}" "$@"
  fi
}

_run_pid=
on_exit() {
  local rc=$?
  if [[ -n ${_cont_started:-} ]]; then
    echo "Removing container ${_cont_name}"
    "${CONTAINER_RUNTIME}" container rm -f "${_cont_name}" >/dev/null ||
      echo "WARNING: could not remove container ${_cont_name}" >&2
  fi
  exit "${rc}"
}
on_signal() { # stop the run in progress; its log keeps what it wrote; on_exit removes the container
  echo "run_with_docker.sh: caught SIG$1, stopping" >&2
  if [[ -n ${_run_pid} ]]; then
    kill -TERM -- "-${_run_pid}" 2>/dev/null || echo "(the run had already ended)" >&2
    wait "${_run_pid}" || echo "run stopped (exit $?); partial log: ${_log}" >&2
    echo "run_with_docker.sh: run stopped by SIG$1" >>"${_log}"
  fi
  exit "$2"
}
trap on_exit EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM

if [[ ${CONTAINER_RUNTIME} == none ]]; then
  export DATADIR LOGDIR PYTHON
  _py=${PYTHON} _in_logdir=${LOGDIR}
else
  if [[ -e /dev/kfd ]]; then
    _gpu_flags=(--device=/dev/kfd --device=/dev/dri --group-add=video)
  elif command -v nvidia-smi >/dev/null; then
    _gpu_flags=(--gpus=all)
  else
    _gpu_flags=()
    echo "WARNING: no /dev/kfd (AMD) and no nvidia-smi (NVIDIA) on this host: the container gets no GPUs" >&2
  fi
  if "${CONTAINER_RUNTIME}" container inspect "${_cont_name}" >/dev/null 2>&1; then
    echo "Removing stale container ${_cont_name}"
    "${CONTAINER_RUNTIME}" container rm -f "${_cont_name}" >/dev/null
  fi
  _cont_mounts=("--volume=${DATADIR}:/data" "--volume=${LOGDIR}:/results")
  _cont_run=("${CONTAINER_RUNTIME}" run --rm --init --detach "--name=${_cont_name}" --net=host --uts=host
    --ipc=host --security-opt=seccomp=unconfined "${_gpu_flags[@]}" "${_cont_mounts[@]}" "${_env_flags[@]}"
    --env=CONFIG_VARS --env=DATADIR=/data --env=LOGDIR=/results "${CONT}" sleep infinity)
  echo "+ ${_cont_run[*]}"
  "${_cont_run[@]}" >/dev/null || die "could not start a container from CONT=${CONT} (the error is above)"
  _cont_started=1
  _py=python3 _in_logdir=/results
fi

echo "Preflight: ${_py} -m training.preflight"
if run_inside -- "${_py}" -m training.preflight; then _rc=0; else _rc=$?; fi
((_rc == 0)) || die "preflight failed (exit ${_rc}): fix what it names above; no run was started"

next_index() { # 1 + the highest <prefix>_<n>.log already in LOGDIR
  local f n max=0
  for f in "${LOGDIR}/${_prefix}"_*.log; do
    n=${f#"${LOGDIR}/${_prefix}_"} && n=${n%.log}
    if [[ ${n} =~ ^[0-9]+$ ]] && ((10#${n} > max)); then max=$((10#${n})); fi
  done
  echo $((max + 1))
}

drop_caches() {
  local cmd
  read -ra cmd <<<"${DROPCACHE_CMD}"
  ((EUID == 0)) || cmd=(sudo -n "${cmd[@]}")
  sync && "${cmd[@]}"
}

run_trial() { # run_trial K TAG SEED: host tuning, cache drop, one timed run; prints everything for the log
  local cleared=0
  echo "Beginning trial $1 of ${NEXP}: RUN_TAG=$2 SEED=$3"
  bash "${SCRIPT_DIR}/runtime_tunables.sh" "${LOGDIR}" || echo "WARNING: runtime_tunables.sh failed (exit $?)" >&2
  if ((CLEAR_CACHES == 0)); then
    echo "CLEAR_CACHES=0: page cache not dropped"
  elif drop_caches; then
    cleared=1 && echo "Clear page cache"
  else
    echo "WARNING: could not drop the page cache (${DROPCACHE_CMD} needs root or passwordless sudo):" \
      "CLEAR_CACHES=0 for this run" >&2
  fi
  run_inside "RUN_TAG=$2" "SEED=$3" "CLEAR_CACHES=${cleared}" -- bash training/run_and_time.sh
}

describe_exit() {
  case $1 in
    1) echo "not converged" ;;
    2) echo "config or data error" ;;
    *) echo "crashed" ;;
  esac
}

_failures=()
_first=$(next_index)
for ((_k = 1; _k <= NEXP; _k++)); do
  _tag="${_prefix}_$((_first + _k - 1))"
  _log="${LOGDIR}/${_tag}.log"
  _seed=$(($(od -An -N4 -tu4 /dev/urandom) & 0x7fffffff))
  # The trial runs as its own process group, so a signal handler can stop all of it. The subshell and tee
  # ignore the stop signal: tee keeps writing the run's last words to the log until the run has ended.
  set -m
  (
    trap '' INT TERM
    set +e
    { trap - INT TERM && run_trial "${_k}" "${_tag}" "${_seed}"; } 2>&1 | tee "${_log}"
    exit "${PIPESTATUS[0]}"
  ) &
  _run_pid=$!
  set +m
  if wait "${_run_pid}"; then _rc=0; else _rc=$?; fi
  _run_pid=
  ((_rc == 0)) || _failures+=("trial ${_k} (${_log}): exit ${_rc}, $(describe_exit "${_rc}")")
  run_inside -- "${_py}" -m training.scoring.compliance "${_in_logdir}/${_tag}.log" ||
    _failures+=("trial ${_k} (${_log}): compliance check failed (exit $?), see ${LOGDIR}/${_tag}.compliance.txt")
done

echo "Scoring: ${_py} -m training.scoring ${_in_logdir}"
run_inside -- "${_py}" -m training.scoring "${_in_logdir}" ||
  _failures+=("scoring of ${LOGDIR} failed (exit $?), see ${LOGDIR}/summary.md")
if ((${#_failures[@]} > 0)); then
  echo "run_with_docker.sh: ${#_failures[@]} problem(s):" >&2
  printf '  - %s\n' "${_failures[@]}" >&2
  exit 1
fi
echo "run_with_docker.sh: ${NEXP} run(s) converged and passed compliance; summary in ${LOGDIR}/summary.md"
