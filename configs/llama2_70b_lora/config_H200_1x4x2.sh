# shellcheck shell=bash
# Llama 2 70B LoRA on 1 node x 4 H200: config_H200_1x8x1.sh's recipe on 4 GPUs at its global batch (GBS 8 =
# MINIBS 2 x 4 GPUs, two forwards of MBS 1 per optimizer step), so its LR, schedule, evaluations and RCP hold.
# Memory, measured on 4 x H200 with all 80 blocks (perf/lora_gpu.sh, perf/RESULTS_ARCHIVE.md, 2026-11-26): each
# GPU holds twice the frozen weights of the 8-GPU run; native FP8 ran at ACL=40 (2,101 tokens/s per
# GPU) and ran out of memory at ACL=30; PRECISION=bf16 ran out at 40 and needs ACL=64.
# Prepare DATADIR once (input_preprocessing/llama2_70b_lora/README.md), then source this file and:
#   export CONT=mlperf/llama70b DATADIR=/data/mlperf_llama2 LOGDIR=./results NEXP=10 && bash run_with_docker.sh
# shellcheck source-path=SCRIPTDIR source=config_H200_1x8x1.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/config_H200_1x8x1.sh"
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_} DGXNNODES=1 DGXNGPU=4 MINIBS=2 WALLTIME=90
export ACL=40  # measured (above); the 8-GPU parent's 32 is derived from this run
# the caching allocator's expandable segments: the runs above used them (fragmentation at 141 GB of 141)
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
