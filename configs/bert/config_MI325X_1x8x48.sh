# AMD's BERT-Large phase-2 values for 1 node x 8 MI325X x 48 packed rows per GPU (AMD's MLPerf BERT blog, v5.0 container).
# Source it, then run the benchmark: source configs/bert/config_MI325X_1x8x48.sh && bash run_with_docker.sh
export BENCHMARK=bert
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=8 WALLTIME=60
export BATCHSIZE=48 GRADIENT_STEPS=1 PACKING_FACTOR=2 PHASE=2
export LR=0.00096 MAX_STEPS=4000 WARMUP_PROPORTION=0.0 START_WARMUP_STEP=0
export OPT_LAMB_BETA_1=0.60466 OPT_LAMB_BETA_2=0.99437 WEIGHT_DECAY_RATE=0.1 INIT_LOSS_SCALE=1024.0
export MAX_SAMPLES_TERMINATION=4500000 EVAL_ITER_START_SAMPLES=290000 EVAL_ITER_SAMPLES=290000
export TARGET_MLM_ACCURACY=0.720
# Precision: AMD trained fp16 with FP8 matmuls (its ROCm Transformer Engine layers: perf/RESULTS.md, "What
# has not run"), and native FP8 does not multiply the FNUZ formats of MI300X/MI325X: PRECISION=auto (bf16).
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=MI325X
# ROCm runtime settings AMD's config carries.
export HIP_FORCE_DEV_KERNARG=1 TORCH_BLAS_PREFER_HIPBLASLT=1
