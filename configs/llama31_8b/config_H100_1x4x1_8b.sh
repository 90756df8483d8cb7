# shellcheck shell=bash
# Llama 3.1 8B on 1 node x 4 H100 80 GB: config_H100_1x8x1_8b.sh's recipe at its global batch (GBS 16 =
# micro-batch 1 x 4 GPUs x 4 accumulation steps), so its LR, schedule and RCP hold. Its memory settings, from
# this machine (`perf/llama_node.sh` STAGES=accum): native FP8, a reduce-scatter after every micro-batch,
# blocks resharded after forward; one reduce-scatter a step or the blocks kept gathered run out of memory.
# Its speed and loss parity: perf/RESULTS.md's tables; its peak: perf/RESULTS.md, "The configs' settings".
# Source it, then: export CONT=... DATADIR=/data/mlperf_llama31_8b/data LOGDIR=./results NEXP=10
# and bash run_with_docker.sh
# shellcheck source-path=SCRIPTDIR source=config_H100_1x8x1_8b.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/config_H100_1x8x1_8b.sh"
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_} DGXNGPU=4 WALLTIME=720
