# shellcheck shell=bash
# Flux.1 values for 1 node x 8 H200, from MLCommons' RCPs (rcps_flux1.json, flux_ref_512: GBS 512, LR 2e-4,
# 1,600 warm-up steps; the smallest RCP batch, the one a single node runs). MBS 32: 2 micro-batches per GPU
# per step (the step's samples are the RCP's global batch whatever the split).
# Source it, then: export CONT=mlperf/flux1 DATADIR=/data/flux1 LOGDIR=./results NEXP=10
# and bash run_with_docker.sh
export BENCHMARK=flux1
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=8 WALLTIME=600
export BATCHSIZE=512 MBS=32 LEARNING_RATE=0.0002 WARMUP_STEPS=1600 MAX_STEPS=-1
export PRECISION=bf16 ACTIVATION_CHECKPOINTING=1 COMPILE_DIT=1
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=H200
