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
# one thread: on a shared 2-core machine, two spinning OpenMP threads per op are ~10x slower than one
export OMP_NUM_THREADS=1
export MAX_SEQLEN=256 MINIBS=8 MBS=4 LR=1.5e-2 MAX_STEPS=192
# The validation loss of the held-out articles' summaries falls from ~5.85 to 5.51-5.61 over the 192 steps
# (three seeds, 2 cores); 5.68 is reached after 640-896 samples, in about a minute, where a run stops (at
# 5.63-5.65). Seeds 1000-1009 converge after 384-1,152 samples; seed 1728352858 does not: it hovers at
# 5.71-5.80 to the sample limit (a run not converged, as MLPerf counts).
export SKIP_EVALS=0 VAL_CHECK_INTERVAL=128 TARGET=5.68
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=CPU
