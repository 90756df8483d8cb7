# The small default: a tiny BERT (2 layers, hidden 128, the real 30,522-token vocabulary) on data prepared
# from the bundled Wikipedia excerpt (no attention dropout: it costs most of a CPU step), one process on
# the CPU, a few minutes on 2 cores. Its target is far
# below MLPerf's 0.720, so its logs and summary are marked NOT a valid MLPerf result.
# Used by ./demo.sh:  source configs/bert/config_CPU_1x1x10.sh && DATADIR=... CONTAINER_RUNTIME=none bash run_with_docker.sh
export BENCHMARK=bert
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=1 WALLTIME=30
export CPU_DEMO=1 BERT_CONFIG_PATH=configs/bert/bert_config_tiny.json INIT_CHECKPOINT=none
# The excerpt's articles are long, so most sequences fill a row: the pipeline packs 1.31 per row.
export BATCHSIZE=10 GRADIENT_STEPS=1 PACKING_FACTOR=1.3 PHASE=2
export LR=0.01 MAX_STEPS=400 WARMUP_PROPORTION=0.0 START_WARMUP_STEP=0
export OPT_LAMB_BETA_1=0.9 OPT_LAMB_BETA_2=0.999 WEIGHT_DECAY_RATE=0.01
export MAX_SAMPLES_TERMINATION=4000 EVAL_ITER_START_SAMPLES=500 EVAL_ITER_SAMPLES=500
export TARGET_MLM_ACCURACY=0.06 NUM_EVAL_EXAMPLES=500 EVAL_BATCH_SIZE=32 LOG_FREQ=50
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=CPU
