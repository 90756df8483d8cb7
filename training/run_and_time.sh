#!/usr/bin/env bash
# One timed run on one node: the environment (the sourced config, plus RUN_TAG, SEED, CLEAR_CACHES, DATADIR
# and LOGDIR from the runner) becomes one torchrun command. Run inside the container by run_with_docker.sh
# (or on the host with CONTAINER_RUNTIME=none, or once per node by run.sub). The official time is not the
# RESULT line's wall clock but run_stop - run_start in the MLLOG lines the trainer prints on rank 0.
# Usage: training/run_and_time.sh (no arguments: the environment says everything; -h/--help: this text).
# Exit status is torchrun's: 0 when every worker converged, 1 whatever a worker's failure was (its own word on
# it is LOGDIR/<RUN_TAG>.outcome.json, training/common/outcome.py); 2 when this script refuses its settings.
set -euo pipefail

# -h/--help prints the comment block above; any other argument is refused before anything is read or written.
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^[^#]/{/^#SBATCH/d;/^# shellcheck/d;/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
  exit 0
fi
if (($# > 0)); then
  echo "run_and_time.sh: error: unknown argument ${1}: it takes none (settings come from the environment);" \
    "see --help" >&2
  exit 2
fi

: "${BENCHMARK:?BENCHMARK not set: the config exports it (python -m training.benchmarks lists them)}"
: "${DGXNNODES:?DGXNNODES not set (number of nodes)}"
: "${DGXNGPU:?DGXNGPU not set (GPUs per node)}"
: "${PYTHON:=python3}"
: "${MLPERF_SUBMISSION_ORG:=reference_implementation}"

die() {
  echo "run_and_time.sh: error: $*" >&2
  exit 2
}
[[ ${DGXNNODES} =~ ^[1-9][0-9]*$ ]] || die "DGXNNODES=${DGXNNODES}: expected a positive whole number"
[[ ${DGXNGPU} =~ ^[1-9][0-9]*$ ]] || die "DGXNGPU=${DGXNGPU}: expected a positive whole number"

# From the repository root, where `-m training....` resolves without relying on PYTHONPATH.
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
# The trainer's module, from the benchmark table (training/benchmarks.py), which names the error itself.
entry=$("${PYTHON}" -m training.benchmarks get "${BENCHMARK}" entry) || exit 2

cmd=("${PYTHON}" -m torch.distributed.run "--nproc_per_node=${DGXNGPU}")
if ((DGXNNODES == 1)); then
  cmd+=(--standalone)
else
  : "${MASTER_ADDR:?MASTER_ADDR not set: the address of the first node (run.sub sets it)}"
  : "${MASTER_PORT:=29500}"
  : "${SLURM_NODEID:?SLURM_NODEID not set: the rank of this node, 0 to DGXNNODES-1 (SLURM sets it)}"
  # one word each on torchrun's command line
  [[ ${SLURM_NODEID} =~ ^(0|[1-9][0-9]{0,5})$ ]] || die "SLURM_NODEID=${SLURM_NODEID}: expected a whole number"
  [[ ${MASTER_PORT} =~ ^[1-9][0-9]{0,4}$ ]] || die "MASTER_PORT=${MASTER_PORT}: expected a port number"
  [[ ${MASTER_ADDR} =~ ^([A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])$ ]] ||
    die "MASTER_ADDR=${MASTER_ADDR}: expected a host name or address"
  cmd+=("--nnodes=${DGXNNODES}" "--node_rank=${SLURM_NODEID}" "--rdzv_endpoint=${MASTER_ADDR}:${MASTER_PORT}")
fi
cmd+=(-m "${entry}")

start=$(date +%s)
start_fmt=$(date +'%Y-%m-%d %r')
echo "STARTING TIMING RUN AT ${start_fmt}"
echo "+ ${cmd[*]}"
status=0
"${cmd[@]}" || status=$?
end=$(date +%s)
echo "ENDING TIMING RUN AT $(date +'%Y-%m-%d %r')"
((status == 0)) || echo "run_and_time.sh: torchrun exited with status ${status}" >&2
echo "RESULT,${BENCHMARK},,$((end - start)),${MLPERF_SUBMISSION_ORG},${start_fmt}"
exit "${status}"
