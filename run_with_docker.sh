#!/usr/bin/env bash
# Host side of one node: config -> one long-lived container -> preflight -> NEXP x (runtime tunables, page
# cache drop, timed run, compliance check) -> host settings put back -> scoring. Each run's log is
# LOGDIR/<BENCHMARK>_<DGXSYSTEM>_<i>.log, numbered on from the highest index already there, so nothing is
# overwritten. One launcher per LOGDIR at a time: a second refuses, naming the first (host, process, start).
# Usage (no arguments: the sourced config and the environment say everything; -h/--help: this text):
#   source configs/bert/config_MI300X_1x8x48.sh
#   export CONT=mlperf/bert DATADIR=/data/bert_data NEXP=10 LOGDIR=./results
#   bash run_with_docker.sh
# CONTAINER_RUNTIME=none runs the in-container steps on this host, from the repo root, with $PYTHON.
# The loop, logs, checks and scoring are scripts/run_common.sh, shared with run.sub (SLURM).
# Exit status: 0 when every run converged and passed its checks, 1 otherwise (each failure is listed),
# 2 for a setup error, 130/143 when stopped by SIGINT/SIGTERM (passed on to the run, whose outcome names it;
# the stopped run's partial log is kept; SIGINT too when started as a script's `cmd &` job, which a shell
# starts with SIGINT ignored).
set -euo pipefail

# -h/--help prints the comment block above; any other argument is refused before anything is read or written.
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^[^#]/{/^#SBATCH/d;/^# shellcheck/d;/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
  exit 0
fi
if (($# > 0)); then
  echo "run_with_docker.sh: error: unknown argument ${1}: it takes none (the sourced config and the" \
    "environment say everything); see --help" >&2
  exit 2
fi

REPO_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
RUNNER=run_with_docker.sh
PATH="${PATH}:/usr/sbin:/sbin" # sysctl
# shellcheck source=scripts/run_common.sh
source "${REPO_DIR}/scripts/run_common.sh"
reexec_with_sigint "$@"

load_config
: "${CONTAINER_RUNTIME:=docker}"
: "${CONT:=}"
case ${CONTAINER_RUNTIME} in
  docker | podman)
    [[ -n ${CONT} ]] || die "CONT not set: export CONT=<image> (or CONTAINER_RUNTIME=none)"
    # one word on the engine's command line, not an option
    [[ ${CONT} =~ ^[A-Za-z0-9_./][A-Za-z0-9_./:@+-]*$ ]] ||
      die "CONT=${CONT}: expected an image name (letters, digits and _ . / : @ + -)"
    require_mountable DATADIR LOGDIR
    if [[ -n ${MODEL:-} ]]; then require_mountable MODEL; fi
    ;;
  none) ;;
  *) die "CONTAINER_RUNTIME=${CONTAINER_RUNTIME}: expected docker, podman or none" ;;
esac
[[ ${DGXNNODES:-1} == 1 ]] ||
  die "DGXNNODES=${DGXNNODES}: this script runs one node; use sbatch -N ${DGXNNODES} run.sub"
config_env
readonly _cont_name=${CONT_NAME}
cd "${REPO_DIR}"

# Where the steps run: in the container, or (none) right here. One node: "each node" is this host.
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
run_training() { run_inside "$@"; }
on_each_node() { "$@"; }
cleanup() {
  if [[ -n ${_cont_started:-} ]]; then
    echo "Removing container ${_cont_name}"
    "${CONTAINER_RUNTIME}" container rm -f "${_cont_name}" >/dev/null ||
      echo "WARNING: could not remove container ${_cont_name}" >&2
  fi
}
install_traps

if [[ ${CONTAINER_RUNTIME} == none ]]; then
  export DATADIR LOGDIR PYTHON
  if [[ -n ${MODEL:-} ]]; then export MODEL; fi
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
  _cont_envs=(--env=CONFIG_VARS --env=DATADIR=/data --env=LOGDIR=/results)
  if [[ -n ${MODEL:-} ]]; then # AMD's 8B: the model folder at /model, as its run_with_docker.sh mounts it
    _cont_mounts+=("--volume=${MODEL}:/model") && _cont_envs+=(--env=MODEL=/model)
  fi
  _cont_run=("${CONTAINER_RUNTIME}" run --rm --init --detach "--name=${_cont_name}" --net=host --uts=host
    --ipc=host --security-opt=seccomp=unconfined "${_gpu_flags[@]}" "${_cont_mounts[@]}"
    "${_pass_env[@]/#/--env=}" "${_cont_envs[@]}" "${CONT}" sleep infinity)
  echo "+ ${_cont_run[*]}"
  "${_cont_run[@]}" >/dev/null || die "could not start a container from CONT=${CONT} (the error is above)"
  _cont_started=1
  _py=python3 _in_logdir=/results
fi

preflight
run_experiments
