#!/usr/bin/env bash
# Every single-GPU BERT measurement behind perf/RESULTS.md, in one call on the GPU machine:
#   1. perf/bench_bert.py: the HF peer and our step (eager, compiled, compiled + CUDA graphs), side by side;
#   2. the same compiled step timed on the excerpt's real packed shards (made here by the data pipeline);
#   3. the runner itself (run_with_docker.sh, CONTAINER_RUNTIME=none) training BERT-Large on those shards with
#      a one-GPU config derived from config_H100_1x8x48.sh, and its logged tracked_stats throughput.
# Host tunables are not touched here (TUNABLES_ROOT points at an empty folder: every setting reads absent).
# Usage (repo root): OUT=/some/dir [STAGES="bench data runner"] bash perf/bert_gpu.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
export PYTHONUNBUFFERED=1 PYTHON="${PYTHON:-python3}"
stages="${STAGES:-bench data runner}"
work="$(mktemp -d)"

if [[ ${stages} == *bench* ]]; then
  "${PYTHON}" perf/bench_bert.py --variants hf,eager,compiled,compiled_cudagraphs 2>&1 | grep -v Warn |
    tee "${out}/bench.log"
  cp "${out}/bench_bert.json" "${out}/bench_synthetic.json"
fi

./input_preprocessing/prepare_data.sh --outputdir "${work}/bert_data" --packed-data --shards 8 \
  --wiki-dump input_preprocessing/bert/sample/enwiki_sample.xml.bz2 --eval-samples 500 > "${out}/prepare.log" 2>&1
if [[ ${stages} == *data* ]]; then
  "${PYTHON}" perf/bench_bert.py --variants compiled --data "${work}/bert_data" --rows 50 2>&1 | grep -v Warn |
    tee "${out}/bench_data.log"
fi
[[ ${stages} == *runner* ]] || exit 0

# A one-GPU config derived from NVIDIA's H100 values, as a user would write one (docs/custom_configs.md).
config="${work}/config_H100_1x1x50.sh"
sed -e 's/DGXNGPU=8/DGXNGPU=1/; s/BATCHSIZE=48/BATCHSIZE=50/; s/PACKING_FACTOR=2/PACKING_FACTOR=1.3/' \
  -e 's/MAX_SAMPLES_TERMINATION=4500000 EVAL_ITER_START_SAMPLES=150000 EVAL_ITER_SAMPLES=150000/MAX_SAMPLES_TERMINATION=48750 EVAL_ITER_START_SAMPLES=16250 EVAL_ITER_SAMPLES=16250/' \
  configs/bert/config_H100_1x8x48.sh > "${config}"
printf 'export COMPILE=1 INIT_CHECKPOINT=none NUM_EVAL_EXAMPLES=500\n' >> "${config}"
(
  # shellcheck disable=SC1090
  source "${config}"
  export CONFIG_FILE="${config}" DATADIR="${work}/bert_data" LOGDIR="${out}/runner" NEXP=1 CONTAINER_RUNTIME=none
  export CLEAR_CACHES=0
  export TUNABLES_ROOT="${work}/no_host_tunables"
  mkdir -p "${TUNABLES_ROOT}"
  status=0
  bash run_with_docker.sh > "${out}/runner.log" 2>&1 || status=$?
  echo "runner exit status ${status} (non-zero expected: BERT-Large from scratch does not reach 0.720 here)"
)
"${PYTHON}" - "${out}" <<'PY'
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
log = next((out / "runner").glob("bert_*.log")).read_text()
stats = [json.loads(m)["value"]["throughput"] for m in re.findall(r':::MLLOG (\{.*"tracked_stats".*\})', log)]
bench = 448.74  # samples/s: stage "data" on an H100, 2026-11-22 (perf/RESULTS.md); rerun it to refresh
if (out / "bench_data.log").exists():
    bench = json.loads((out / "bench_bert.json").read_text())["runs"]["compiled"]["samples_per_s"]
print(f"runner tracked_stats throughput per eval window: {[round(s, 1) for s in stats]}")
print(f"perf script, same shards and rows: {bench:.1f} samples/s; runner/perf: {[round(s / bench, 3) for s in stats]}")
PY
