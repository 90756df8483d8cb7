# shellcheck shell=bash
# Llama 2 70B LoRA on 1 node x 8 MI325X: AMD's MLPerf Training v5.1 values (config_MI325X_1x8x1.sh).
# Where it stands: perf/RESULTS.md, "What has not run".
# Prepare DATADIR once (input_preprocessing/llama2_70b_lora/README.md), then source this file and:
#   export CONT=mlperf/llama70b DATADIR=/data/mlperf_llama2 LOGDIR=./results NEXP=10 && bash run_with_docker.sh
export BENCHMARK=llama2_70b_lora
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=8 WALLTIME=60
# GBS 8 (MINIBS 1 x 8 GPUs), cosine from LR to 0 over MAX_STEPS, evaluations every 384 samples after 3 skipped.
export MINIBS=1 MBS=1 LR=0.0004 MAX_STEPS=1024 SKIP_EVALS=3 VAL_CHECK_INTERVAL=384
# FP8 matmuls in the blocks (FP8_BACKEND=auto: our native FP8 where the OCP formats run, Transformer Engine on
# MI300X/MI325X), FSDP2 over the 8 GPUs gathering the frozen weights in FP8, untimed synthetic warm-up steps
# before run_start. Loss parity (perf/RESULTS.md's curve and convergence tables): native FP8 tracks bf16 over
# 50 steps on text and passes the convergence check; memorising one row it learns more slowly, as torchao's FP8
# does (per-tensor FP8's own); PRECISION=bf16 is the checked alternative.
export PRECISION=fp8 FP8_BACKEND=auto FP8_PARAM_GATHER=1 WARMUP=1 WARMUP_TRAIN_STEPS=5
# Delayed scaling's amax as AMD's and NVIDIA's v5.x configs set it: the most recent of a 4-step history.
export FP8_AMAX_HISTORY=4 FP8_AMAX_ALGO=most_recent
# Precision: the submission's FP8, but on this GPU FP8_BACKEND=auto is Transformer Engine (AMD's own path: native
# FP8 does not multiply the FNUZ formats of MI300X/MI325X; perf/RESULTS.md, "What has not run");
# PRECISION=bf16 runs without it.
export ACTIVATION_CHECKPOINTING=0  # 256 GB per GPU: no recompute, as AMD
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=MI325X
# ROCm runtime settings AMD's configs carry.
export HIP_FORCE_DEV_KERNARG=1 TORCH_BLAS_PREFER_HIPBLASLT=1 OMP_NUM_THREADS=1
