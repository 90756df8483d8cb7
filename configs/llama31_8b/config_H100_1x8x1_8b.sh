# shellcheck shell=bash
# NVIDIA-style Llama 3.1 8B values for 1 node x 8 H100 80 GB: config_H200_1x8x1_8b.sh's recipe (GBS 16, LR 4e-4,
# 16 warm-up steps; micro-batch 1, 2 accumulation steps) with the memory settings of an 80 GB card.
# Memory, from 4 x H100 (config_H100_1x4x1_8b.sh: GBS 16 as 4 micro-batches a GPU, native FP8): holding the
# float32 gradients of the whole model between micro-batches (one reduce-scatter a step, as on H200) runs out
# of memory, and so does keeping the blocks gathered; reducing after every micro-batch
# (REDUCE_EACH_MICRO_BATCH=1) fits. On 8 GPUs (derived): the sharded float32 weights, gradients and AdamW
# state (16 bytes a parameter) take half of what they take on 4 GPUs; the whole model's float32 gradients held
# between the two micro-batches would not fit, and the blocks kept gathered would leave little margin, so the
# blocks are resharded after forward, as on 4 GPUs. The peaks and the arithmetic: perf/RESULTS.md, "The
# configs' settings".
# Source it, then: export CONT=... DATADIR=/data/mlperf_llama31_8b/data LOGDIR=./results NEXP=10
# and bash run_with_docker.sh
# shellcheck source-path=SCRIPTDIR source=config_H200_1x8x1_8b.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/config_H200_1x8x1_8b.sh"
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export RESHARD_AFTER_FORWARD=1 REDUCE_EACH_MICRO_BATCH=1
# gradients reduce-scattered in bf16, as AMD's and NVIDIA's 8B submissions (grad_reduce_in_fp32=False); after
# every micro-batch the sharded float32 gradients still accumulate in float32 (speed and loss parity of this
# mode: perf/RESULTS.md)
export GRAD_REDUCE_IN_FP32=0
export MLPERF_SUBMISSION_PLATFORM=H100
