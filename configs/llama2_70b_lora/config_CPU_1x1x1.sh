# shellcheck shell=bash
# The small default: Llama 2 70B LoRA's recipe on a tiny Llama 2 (2 blocks, hidden 64, 256-token packed rows)
# fine-tuned on the bundled Wikipedia excerpt, on one CPU process. A demo of the whole pipeline in a few
# minutes, NOT an MLPerf result (CPU_DEMO=1, another model, sequence length and target; the log says so).
# Prepare its data and base model once (two minutes) with
#   BENCHMARK=llama2_70b_lora ./input_preprocessing/prepare_data.sh --outputdir /data/lora_demo --sample --seq-len 256
# then, without a container (the code of this checkout runs on this host):
#   source configs/llama2_70b_lora/config_CPU_1x1x1.sh && DATADIR=/data/lora_demo CONTAINER_RUNTIME=none bash run_with_docker.sh
export BENCHMARK=llama2_70b_lora
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=1 WALLTIME=15
export CPU_DEMO=1 PRECISION=fp32 WARMUP=0
# one thread: on a shared 2-core machine, two spinning OpenMP threads per op are much slower than one
# (perf/RESULTS.md, "The configs' settings")
export OMP_NUM_THREADS=1
export MAX_SEQLEN=256 MINIBS=8 MBS=4 LR=1.5e-2 MAX_STEPS=192
# The validation loss of the held-out articles' summaries falls to TARGET within MAX_STEPS, where a run stops;
# a drawn seed may hover above it to the sample limit (a run not converged, as MLPerf counts). The losses and
# seeds: perf/RESULTS.md, "The configs' settings".
export SKIP_EVALS=0 VAL_CHECK_INTERVAL=128 TARGET=5.68
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=CPU
