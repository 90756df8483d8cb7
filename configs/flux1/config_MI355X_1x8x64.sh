# shellcheck shell=bash
# AMD's MLPerf Training v6.0 flux1 values for 1 node x 8 MI355X (AMD's config_MI355X_01x08x64.sh in
# AMD/benchmarks/flux1/implementations/MI355X_EPYC_9575F_pytorch): GBS 512 (8 GPUs x 64, no accumulation),
# LR 2e-4 after 1,600 warm-up steps: the GBS 512 RCP's.
# Source it, then: export CONT=mlperf/flux1 DATADIR=/data/flux1 LOGDIR=./results NEXP=10
# and bash run_with_docker.sh
export BENCHMARK=flux1
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=8 SEGMENT=1 WALLTIME_RUNANDTIME=200 WALLTIME=210
export BATCHSIZE=512 MBS=64 LEARNING_RATE=0.0002 WARMUP_STEPS=1600 MAX_STEPS=-1
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-AMD} MLPERF_SUBMISSION_PLATFORM=MI355X
export NVTE_CK_IS_V3_ATOMIC_FP32=0
# AMD's Transformer Engine (ROCm) and runtime settings, as published: read by their libraries or named not
# applicable here (python -m training.common.vendor_vars flux1 says which, and why).
export NVTE_RS_STRIDED_ATOMIC=2 NVTE_FP8_DPA_BWD=1 NVTE_FUSED_ATTN=1 NVTE_FUSED_ATTN_CK=1 NVTE_FUSED_ATTN_AOTRITON=1
export NVTE_DEBUG=0 NVTE_DEBUG_LEVEL=0 NVTE_USE_HIPBLASLT=1 NVTE_USE_CAST_TRANSPOSE_TRITON=0 USE_TE_SWIGLU=1
export NVTE_CK_USES_BWD_V3=1 NVTE_CK_USES_FWD_V3=1
export CK_FUSED_ATTN_LOG_CONFIG=0 NVTE_LOG_CK_CONFIG=0 NVTE_LOG_FUSED_ATTN_CONFIG=0 CHECK_FOR_NAN_IN_GRAD=0
export FUSED_SOFTMAX=0 RMSNORM_CAST=0 ENABLE_TRANSPOSE_CACHE=0 USE_HIPBLASLT=1 TORCH_BLAS_PREFER_HIPBLASLT=1
export CUDA_GRAPH_IMPL=local CPU_OFFLOADING=False CPU_OFFLOADING_ACTIVATIONS=False
# AMD compiles its DiT (COMPILE_DIT=1: each block here) with its "stack" strategy (not applicable here).
export COMPILE_DIT=1 COMPILE_DIT_STRATEGY=stack
# AMD's FP8 recipe: the blocks' GEMMs in FP8 with delayed scaling (PRECISION=fp8; FP8_BACKEND=auto: ours on
# MI355X, whose FP8 formats are the OCP ones; Transformer Engine on MI325X where the image has it).
export FP8_RECIPE=delayed
# The reference recomputes every block in the backward (its activation_checkpoint.mode = "full").
export ACTIVATION_CHECKPOINTING=1
