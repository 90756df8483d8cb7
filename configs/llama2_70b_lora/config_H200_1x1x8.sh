# shellcheck shell=bash
# Llama 2 70B LoRA on ONE H200: config_H200_1x8x1.sh's recipe at its global batch (GBS 8 = MINIBS 8 x 1 GPU,
# eight forwards of MBS 1 per optimizer step), so its LR, schedule, evaluations and RCP hold. The frozen base
# is stored in FP8 (FP8_WEIGHTS=1: 64 GiB for the 80 blocks' linears, no weight casts in the step); the
# memory left on the 140 GiB card keeps the last blocks' activations instead of recomputing them: each kept
# block holds about 1.4 GiB at 8192 tokens, so ACL (the blocks recomputed, counted from the first) is the
# smallest that fits with a margin (perf/RESULTS.md gives the measured sweep and the speed of this config).
# Prepare DATADIR once (input_preprocessing/llama2_70b_lora/README.md), then source this file and:
#   export CONT=mlperf/llama70b DATADIR=/data/mlperf_llama2 LOGDIR=./results NEXP=10 && bash run_with_docker.sh
# shellcheck source-path=SCRIPTDIR source=config_H200_1x8x1.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/config_H200_1x8x1.sh"
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_} DGXNNODES=1 DGXNGPU=1 MINIBS=8 WALLTIME=480
export FP8_BACKEND=native FP8_WEIGHTS=1 FP8_PARAM_GATHER=0 ACL=40  # FP8-stored weights are native FP8
# the caching allocator's expandable segments: the step's peak sits a few GiB under the card's size
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
