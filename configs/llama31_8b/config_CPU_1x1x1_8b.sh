# shellcheck shell=bash
# The small default: Llama 3.1 8B's architecture at toy size (2 layers, hidden 64, 256-token sequences) on the
# bundled Wikipedia excerpt, on one CPU process. A demo of the whole pipeline in a few minutes, NOT an MLPerf
# result (CPU_DEMO=1 and a reachable TARGET; the log says so). Prepare its data once with
#   ./input_preprocessing/llama31_8b/prepare_data.sh --outputdir /data/llama_demo --sample
# then, without a container (the code of this checkout runs on this host):
#   source configs/llama31_8b/config_CPU_1x1x1_8b.sh && DATADIR=/data/llama_demo CONTAINER_RUNTIME=none bash run_with_docker.sh
export BENCHMARK=llama31_8b
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=1 WALLTIME=15
export CPU_DEMO=1 PRECISION=fp32 NUM_WORKERS=0 LOG_FREQ=32
# one thread: on a shared 2-core machine, two spinning OpenMP threads per op are much slower than one
# (perf/RESULTS.md, "The configs' settings")
export OMP_NUM_THREADS=1
export TRAIN_DATA_PREFIX=wiki-train_text_document VALID_DATA_PREFIX=wiki-validation_text_document
export MODEL_SIZE=8b NUM_LAYERS=2 HIDDEN_SIZE=64 FFN_HIDDEN_SIZE=192 NUM_ATTENTION_HEADS=4 NUM_QUERY_GROUPS=2
export VOCAB_SIZE=4096 SEQ_LENGTH=256
export GBS=8 MBS=4 MAX_LR=3e-3 WARMUP_STEPS=16
export EVAL_EVERY=512 EVAL_SAMPLES=1024 TARGET=5.8 MAX_SAMPLES_TERMINATION=8192
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=CPU
