# shellcheck shell=bash
# Llama 2 70B LoRA on 1 node x 8 H200: NVIDIA's v4.1 schedule (config_DGXH200_1x8x2xtp1pp1cp2.sh: LR 5e-4 over 896 steps) without its context parallelism.
# Memory: ACL derived from the 4 x H200 run (config_H200_1x4x2.sh: native FP8 at ACL=24 on GovReport's
# layout, twice the weights a GPU): each GPU here holds half its bf16 frozen base (69.0e9 x 2 bytes / 8
# instead of / 4), and a block kept rather than recomputed adds its forward's saved tensors, so ACL=14 keeps
# ten more blocks within the memory freed and peaks just below the 4-GPU run. An out-of-memory error names
# ACL; 24 is the fallback. The peak, the per-block cost and the arithmetic: perf/RESULTS.md, "The configs'
# settings".
# Prepare DATADIR once (input_preprocessing/llama2_70b_lora/README.md), then source this file and:
#   export CONT=mlperf/llama70b DATADIR=/data/mlperf_llama2 LOGDIR=./results NEXP=10 && bash run_with_docker.sh
export BENCHMARK=llama2_70b_lora
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=8 WALLTIME=60
# GBS 8 (MINIBS 1 x 8 GPUs), cosine from LR to 0 over MAX_STEPS, evaluations every 384 samples after 3 skipped.
export MINIBS=1 MBS=1 LR=0.0005 MAX_STEPS=896 SKIP_EVALS=3 VAL_CHECK_INTERVAL=384
# FP8 matmuls in the blocks (FP8_BACKEND=auto: our native FP8 where the OCP formats run, Transformer Engine on
# MI300X/MI325X), FSDP2 over the 8 GPUs gathering the frozen weights in FP8, untimed synthetic warm-up steps
# before run_start. Loss parity (perf/RESULTS.md's curve and convergence tables): native FP8 tracks bf16 over
# 50 steps on text and passes the convergence check; memorising one row it learns more slowly, as torchao's FP8
# does (per-tensor FP8's own); PRECISION=bf16 is the checked alternative.
export PRECISION=fp8 FP8_BACKEND=auto FP8_PARAM_GATHER=1 WARMUP=1 WARMUP_TRAIN_STEPS=5
# Delayed scaling's amax as AMD's and NVIDIA's v5.x configs set it: the most recent of a 4-step history.
export FP8_AMAX_HISTORY=4 FP8_AMAX_ALGO=most_recent
# Each transformer block compiled, as every LoRA rate and peak in perf/RESULTS.md was measured (eager, a
# block keeps other tensors for its backward, and ACL's memory arithmetic does not hold).
export COMPILE=1
export ACTIVATION_CHECKPOINTING=1 ACL=14  # 141 GB per GPU: the first 14 blocks recomputed (derived above)
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=H200
