#!/usr/bin/env bash
# Every single-GPU BERT measurement behind perf/RESULTS.md, in one call on the GPU machine:
#   bench:  perf/bench_bert.py, the HF peer and our step (BENCH_VARIANTS, ';'-separated 'LABEL: NAME=VALUE ...',
#           default compiled, compiled + CUDA graphs, compiled FP8; eager the reference), side by side;
#   data:   the same compiled step timed on the excerpt's real packed shards (made here by the data pipeline)
#           (DATA_VARIANT: the variant's overrides, default COMPILE=1);
#   runner: the runner itself (run_with_docker.sh, CONTAINER_RUNTIME=none) training BERT-Large on those shards
#           with a one-GPU config derived from config_H100_1x8x48.sh (RUNNER_SETTINGS: VAR=value overrides to
#           match DATA_VARIANT), and its logged tracked_stats throughput against stage data's;
#   curves: the runner once per curve from the same seed, 200 steps with an eval every 1,000 samples
#           (CURVE_SETTINGS overrides these for all, e.g. "COMPILE=0 MAX_SAMPLES_TERMINATION=40000"): every
#           masked-LM accuracy curve (and training losses) and its largest difference from the first. CURVES:
#           space-separated NAME=VAR=value[,VAR=value...], default
#           "bf16=PRECISION=bf16 fp8=PRECISION=fp8,FP8_BACKEND=${FP8_BACKEND:-auto}".
# Host tunables are not touched here (TUNABLES_ROOT points at an empty folder: every setting reads absent).
# Usage (repo root): OUT=/some/dir [STAGES="bench data runner curves"] bash perf/bert_gpu.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
export PYTHONUNBUFFERED=1 PYTHON="${PYTHON:-python3}"
stages="${STAGES:-bench data runner curves}"
work="$(mktemp -d)"

if [[ ${stages} == *bench* ]]; then
  "${PYTHON}" -m perf.bench_bert --variant "${BENCH_VARIANTS:-compiled: COMPILE=1; \
cudagraphs: COMPILE=1 COMPILE_MODE=reduce-overhead; fp8: COMPILE=1 PRECISION=fp8}" 2>&1 |
    grep -v Warn |
    tee "${out}/bench.log"
  cp "${out}/bench_bert.json" "${out}/bench_synthetic.json"
fi

./input_preprocessing/prepare_data.sh --outputdir "${work}/bert_data" --packed-data --shards 8 \
  --wiki-dump input_preprocessing/bert/sample/enwiki_sample.xml.bz2 --eval-samples 500 > "${out}/prepare.log" 2>&1
if [[ ${stages} == *data* ]]; then
  "${PYTHON}" -m perf.bench_bert --variant "data: ${DATA_VARIANT:-COMPILE=1}" --reference none --peer none \
    --data "${work}/bert_data" --rows 50 2>&1 |
    grep -v Warn |
    tee "${out}/bench_data.log"
fi

# A one-GPU config derived from NVIDIA's H100 values, as a user would write one (docs/custom_configs.md).
config="${work}/config_H100_1x1x50.sh"
sed -e 's/DGXNGPU=8/DGXNGPU=1/; s/BATCHSIZE=48/BATCHSIZE=50/; s/PACKING_FACTOR=2/PACKING_FACTOR=1.3/' \
  -e 's/MAX_SAMPLES_TERMINATION=4500000 EVAL_ITER_START_SAMPLES=150000 EVAL_ITER_SAMPLES=150000/MAX_SAMPLES_TERMINATION=48750 EVAL_ITER_START_SAMPLES=16250 EVAL_ITER_SAMPLES=16250/' \
  configs/bert/config_H100_1x8x48.sh > "${config}"
printf 'export INIT_CHECKPOINT=none NUM_EVAL_EXAMPLES=500\n' >> "${config}"

runner() {  # runner LOGDIR [VAR=VALUE...]: the config above, NEXP=1, with these overrides
  local logdir="$1" status=0
  shift
  (
    # shellcheck disable=SC1090
    source "${config}"
    export CONFIG_FILE="${config}" DATADIR="${work}/bert_data" LOGDIR="${logdir}" NEXP=1 CONTAINER_RUNTIME=none
    export CLEAR_CACHES=0 TUNABLES_ROOT="${work}/no_host_tunables"
    for setting in "$@"; do export "${setting?}"; done
    mkdir -p "${TUNABLES_ROOT}"
    bash run_with_docker.sh
  ) > "${logdir}.log" 2>&1 || status=$?
  echo "runner ${logdir##*/}: exit status ${status} (non-zero expected: BERT-Large from scratch does not reach 0.720 here)"
}

if [[ ${stages} == *curves* ]]; then
  names=()
  for curve in ${CURVES:-bf16=PRECISION=bf16 fp8=PRECISION=fp8,FP8_BACKEND=${FP8_BACKEND:-auto}}; do
    names+=("${curve%%=*}")
    settings="${curve#*=}"
    # shellcheck disable=SC2086 # CURVE_SETTINGS and the curve's settings: VAR=value words
    runner "${out}/curve_${curve%%=*}" SEED=1234 MAX_SAMPLES_TERMINATION=10000 EVAL_ITER_START_SAMPLES=1000 \
      EVAL_ITER_SAMPLES=1000 LOG_FREQ=20 ${CURVE_SETTINGS:-} ${settings//,/ }
  done
  compared=()
  for name in "${names[@]}"; do compared+=("${name}=${out}/curve_${name}"); done
  "${PYTHON}" -m perf.logs compare --json "${out}/curves.json" "${compared[@]}"
fi
[[ ${stages} == *runner* ]] || exit 0
# shellcheck disable=SC2086 # RUNNER_SETTINGS: VAR=value words
runner "${out}/runner" ${RUNNER_SETTINGS:-}
# the runner's throughput, against stage data's on the same shards and rows where that stage ran
against=()
[[ ! -f ${out}/bench_data.log ]] || against=(--bench "${out}/bench_bert.json" --variant data)
"${PYTHON}" -m perf.logs throughput "${out}/runner" "${against[@]}"
