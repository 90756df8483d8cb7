# NVIDIA's BERT-Large phase-2 values for 1 node x 8 H200 x 48 packed rows per GPU (NVIDIA's DGX H100/H200 submissions, config_DGXH100_1x8x48x1_pack.sh).
# Source it, then run the benchmark: source configs/bert/config_H200_1x8x48.sh && bash run_with_docker.sh
export BENCHMARK=bert
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=8 WALLTIME=60
export BATCHSIZE=48 GRADIENT_STEPS=1 PACKING_FACTOR=2 PHASE=2
export LR=0.00096 MAX_STEPS=3680 WARMUP_PROPORTION=0.0 START_WARMUP_STEP=0
export OPT_LAMB_BETA_1=0.60466 OPT_LAMB_BETA_2=0.85437 WEIGHT_DECAY_RATE=0.1 INIT_LOSS_SCALE=1024.0
export MAX_SAMPLES_TERMINATION=4500000 EVAL_ITER_START_SAMPLES=150000 EVAL_ITER_SAMPLES=150000
export TARGET_MLM_ACCURACY=0.720
# Ours, not NVIDIA's: the compiled step (its warm-up runs before run_start). The fastest mode
# (perf/RESULTS.md) adds PRECISION=fp8 FP8_BACKEND=native COMPILE_MODE=reduce-overhead RESIDUAL_DTYPE=bf16.
# NVIDIA trained fp16 with Transformer Engine FP8 (--use_transformer_engine2); bf16 (PRECISION=auto) here
# (Transformer Engine: perf/RESULTS.md, "What has not run").
export COMPILE=1
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=H200
