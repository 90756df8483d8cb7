# The small default: a tiny BERT (2 layers, hidden 64, the real 30,522-token vocabulary) on 128-token rows
# prepared from the bundled Wikipedia excerpt, one process on the CPU, a few minutes on 2 cores. Its masked-LM
# accuracy climbs from guessing "the" for every masked token to its target 0.12, mostly by learning that a
# masked position still showing a word (1 in 10 keep their token) holds that word. The target is far below
# MLPerf's 0.720, so its logs and summary are marked NOT a valid MLPerf result. How it learns with these
# settings: perf/RESULTS.md, "The configs' settings".
# Used by ./demo.sh:  source configs/bert/config_CPU_1x1x10.sh && DATADIR=... CONTAINER_RUNTIME=none bash run_with_docker.sh
# DATADIR must be prepared with this config's MAX_SEQ_LENGTH and MAX_PREDICTIONS_PER_SEQ (demo.sh passes them
# to prepare_data.sh as --max-seq-length and --max-predictions-per-seq).
export BENCHMARK=bert
# The config names itself: the launchers read its variable names from this file; DGXSYSTEM is its name.
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
export DGXNNODES=1 DGXNGPU=1 WALLTIME=30
# bert_config_tiny.json: hidden 64 (the output layer over 30,522 tokens is most of a step's time), no dropout,
# weights drawn at 0.04, twice BERT's: with LR 0.012 they learn faster than BERT's 0.02 with LR 0.02.
export CPU_DEMO=1 BERT_CONFIG_PATH=configs/bert/bert_config_tiny.json INIT_CHECKPOINT=none
# 128-token rows (BERT's phase-1 length): accuracy here grows with optimizer steps, and a 128-token step
# costs far less than a 512-token one. PACKING_FACTOR: the sequences the pipeline packs a row.
export MAX_SEQ_LENGTH=128 MAX_PREDICTIONS_PER_SEQ=20
export BATCHSIZE=10 GRADIENT_STEPS=1 PACKING_FACTOR=1.1 PHASE=2
# Warm-up (48 steps), then linear decay to 0 at the last step; LR 0.02 with these weights learns more slowly.
export LR=0.012 MAX_STEPS=1200 WARMUP_PROPORTION=0.04 START_WARMUP_STEP=0
export OPT_LAMB_BETA_1=0.9 OPT_LAMB_BETA_2=0.999 WEIGHT_DECAY_RATE=0.01
# An eval every 100 steps (1,100 samples), the last at MAX_STEPS, where the run stops (evaluations are
# scheduled below MAX_SAMPLES_TERMINATION); runs reach the target well before MAX_STEPS.
export MAX_SAMPLES_TERMINATION=14300 EVAL_ITER_START_SAMPLES=1100 EVAL_ITER_SAMPLES=1100
export TARGET_MLM_ACCURACY=0.12 NUM_EVAL_EXAMPLES=500 EVAL_BATCH_SIZE=32 LOG_FREQ=100
export MLPERF_SUBMISSION_ORG=${MLPERF_SUBMISSION_ORG:-reproduction} MLPERF_SUBMISSION_PLATFORM=CPU
