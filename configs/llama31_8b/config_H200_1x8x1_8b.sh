# shellcheck shell=bash
# NVIDIA-style Llama 3.1 8B values for 1 node x 8 H200: GBS 16, LR 4e-4, 16 warm-up steps (NVIDIA's v5.1
# 8-GPU configs, config_common_8b.sh; MLPerf's GBS 16 RCP). NVIDIA runs micro-batch 2 with Transformer Engine;
# here micro-batch 1 with 2 accumulation steps keeps the PyTorch-native path inside the memory.
# Source it, then: export CONT=... DATADIR=/data/mlperf_llama31_8b/data LOGDIR=./results NEXP=10
# and bash run_with_docker.sh
export BENCHMARK=llama31_8b
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=8 WALLTIME=360
export GBS=16 MBS=1 MAX_LR=4e-4 WARMUP_STEPS=16
export MAX_STEPS=1200000 EVAL_EVERY=12288 START_EVAL_AT=0 EVAL_SAMPLES=1024 TARGET=3.3
# No sample limit, as AMD's and NVIDIA's runs: a run ends at TARGET or after MAX_STEPS. To bound a run that
# does not converge, set MAX_SAMPLES_TERMINATION (not theirs; the data order does not depend on it).
export TENSOR_MODEL_PARALLEL_SIZE=1 PIPELINE_MODEL_PARALLEL_SIZE=1 CONTEXT_PARALLEL_SIZE=1
# FP8: no 8-GPU H100/H200 result exists in v5.1 (MLCommons ships an H200 reference config: GBS 32, LR 5e-4);
# these are NVIDIA's GBS-16 values. FP8_BACKEND=auto: our native FP8 (=te for
# the NGC image's Transformer Engine: perf/RESULTS.md, "What has not run").
export PRECISION=fp8 FP8_BACKEND=auto COMPILE=1 ACTIVATION_CHECKPOINTING=0
# Blocks stay gathered from forward to backward (half the all-gathers): faster, for the whole model's bf16
# weights held on each GPU (perf/RESULTS.md, "The configs' settings").
export RESHARD_AFTER_FORWARD=0
# Two forward+backward passes on random tokens before run_start compile the blocks (no weight update).
export SYNTHETIC_WARMUP_STEPS=2
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=H200
export OMP_NUM_THREADS=1
