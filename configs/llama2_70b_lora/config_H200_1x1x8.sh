# shellcheck shell=bash
# Llama 2 70B LoRA on ONE H200: config_H200_1x8x1.sh's recipe at its global batch (GBS 8 = MINIBS 8 x 1 GPU,
# eight forwards of MBS 1 per optimizer step), so its LR, schedule, evaluations and RCP hold. The frozen base
# is stored in FP8 (FP8_WEIGHTS=1: one byte a weight, no weight casts in the step); the memory left on the
# card keeps the last blocks' activations instead of recomputing them, their SwiGLU inputs as e4m3 codes
# (FP8_MLP_ACTIVATIONS=1: a kept block saves less), so that ACL (the blocks recomputed, counted from the
# first) is 24 where bf16 inputs left it at 40. Chosen by perf/RESULTS.md ("The whole 70B LoRA on one H200"):
# the 80-block bench against ACL 40, the trainer's rate and peak, and the 40-block curve where FP8 SwiGLU
# inputs part from plain FP8 less than other dropout seeds part from each other. Fast accumulation
# (FP8_FAST_ACCUM) stays off: its curve parts from FP8's farther than the seeds do.
# Prepare DATADIR once (input_preprocessing/llama2_70b_lora/README.md), then source this file and:
#   export CONT=mlperf/llama70b DATADIR=/data/mlperf_llama2 LOGDIR=./results NEXP=10 && bash run_with_docker.sh
# shellcheck source-path=SCRIPTDIR source=config_H200_1x8x1.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/config_H200_1x8x1.sh"
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_} DGXNNODES=1 DGXNGPU=1 MINIBS=8 WALLTIME=480
# FP8-stored weights and FP8 SwiGLU inputs are native FP8's
export FP8_BACKEND=native FP8_WEIGHTS=1 FP8_PARAM_GATHER=0 FP8_MLP_ACTIVATIONS=1 ACL=24
# the caching allocator's expandable segments: the step's peak sits a few GiB under the card's size, less
# than what fragmentation can leave reserved but unallocated without them
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
