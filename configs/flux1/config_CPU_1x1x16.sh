# shellcheck shell=bash
# The small default: Flux.1's MMDiT at toy size (one double and two single blocks, hidden 64) on the made-up
# captioned-image sample in the published layout, one CPU process. Its validation loss falls from 1 + E[x0^2]
# (what a model that predicts nothing scores) to its target 0.7 in a few hundred steps (minutes on 2 cores). A
# demo of the whole pipeline, NOT an MLPerf result (CPU_DEMO=1, the sample, the target; the log says so).
# Prepare its data once with
#   ./input_preprocessing/flux1/prepare_data.sh --outputdir /data/flux_demo --sample
# then, without a container (the code of this checkout runs on this host):
#   source configs/flux1/config_CPU_1x1x16.sh && DATADIR=/data/flux_demo CONTAINER_RUNTIME=none bash run_with_docker.sh
export BENCHMARK=flux1
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=1 WALLTIME=15
export CPU_DEMO=1 PRECISION=fp32 LOG_FREQ=100
# one thread: on a shared 2-core machine, two spinning OpenMP threads per op are much slower than one
# (perf/RESULTS.md, "The configs' settings")
export OMP_NUM_THREADS=1
export MODEL_SIZE=tiny
# The reference's recipe (AdamW 0.9/0.95, decay 0.1, clip 1, linear warm-up then a constant LR) at a batch
# of 16 and an LR for the toy model's size.
export BATCHSIZE=16 MBS=16 LEARNING_RATE=3e-3 WARMUP_STEPS=50 MAX_STEPS=1500
# An evaluation every 100 steps on the whole 512-row sample validation set (64 rows per timestep).
export EVAL_EVERY=1600 EVAL_SAMPLES=512 TARGET_ACCURACY=0.7
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=CPU
