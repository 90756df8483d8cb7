# shellcheck shell=bash
# AMD's MLPerf Training v6.0 Llama 3.1 8B values for 1 node x 8 MI350X (its Primus config_MI350X_1x8x1.sh and
# llama3.1_8B-pretrain-fp4.yaml; the name keeps AMD's "x1" although the micro-batch is 2). GBS 32 on 8 GPUs:
# 2 micro-batches of 2 per GPU per step. v6.0 changed the warm-up from 128 to 64 steps; AMD's v6.0 trains
# MXFP4 (FP4=true); FP4=true FP4_RECIPE=mxfp4 runs that recipe here with emulated 4-bit GEMMs (for
# numerics, not speed: no ROCm 4-bit GEMM here), so this config trains FP8.
# Only MAX_LR (and the platform) differ from the MI355X config, as in AMD's submission.
# Source it, then: export CONT=... DATADIR=/data/mlperf_llama31_8b/data LOGDIR=./results NEXP=10
# and bash run_with_docker.sh
export BENCHMARK=llama31_8b
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=8 WALLTIME=210
export GBS=32 MBS=2 MAX_LR=1e-3 WARMUP_STEPS=64
export MAX_STEPS=1200000 EVAL_EVERY=12288 START_EVAL_AT=0 EVAL_SAMPLES=1024 TARGET=3.3
# No sample limit, as AMD's and NVIDIA's runs: a run ends at TARGET or after MAX_STEPS. To bound a run that
# does not converge, set MAX_SAMPLES_TERMINATION (not theirs; the data order does not depend on it).
export TENSOR_MODEL_PARALLEL_SIZE=1 PIPELINE_MODEL_PARALLEL_SIZE=1 CONTEXT_PARALLEL_SIZE=1
# FP8 (FP8_BACKEND=auto: our native FP8 on this GPU's OCP formats; =te for the ROCm image's Transformer Engine,
# as AMD submitted: perf/RESULTS.md, "What has not run"); blocks compiled, no recompute.
export PRECISION=fp8 FP8_BACKEND=auto COMPILE=1 ACTIVATION_CHECKPOINTING=0
# Blocks stay gathered from forward to backward (half the all-gathers): faster, for the whole model's bf16
# weights held on each GPU (perf/RESULTS.md, "The configs' settings").
export RESHARD_AFTER_FORWARD=0
# Two forward+backward passes on random tokens before run_start compile the blocks (no weight update).
export SYNTHETIC_WARMUP_STEPS=2
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=MI350X
# ROCm runtime settings AMD's configs carry.
export HIP_FORCE_DEV_KERNARG=1 TORCH_BLAS_PREFER_HIPBLASLT=1 OMP_NUM_THREADS=1
