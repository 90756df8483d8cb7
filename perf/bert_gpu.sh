#!/usr/bin/env bash
# Every single-GPU BERT measurement behind perf/RESULTS.md, in one call on the GPU machine:
#   bench:  perf/bench_bert.py, the HF peer and our step (BENCH_VARIANTS, default eager, compiled, compiled +
#           CUDA graphs, compiled FP8), side by side;
#   data:   the same compiled step timed on the excerpt's real packed shards (made here by the data pipeline)
#           (DATA_VARIANT, default compiled: a bench_bert.py variant);
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
  "${PYTHON}" -m perf.bench_bert --variants "${BENCH_VARIANTS:-hf,eager,compiled,compiled_cudagraphs,compiled_fp8}" 2>&1 |
    grep -v Warn |
    tee "${out}/bench.log"
  cp "${out}/bench_bert.json" "${out}/bench_synthetic.json"
fi

./input_preprocessing/prepare_data.sh --outputdir "${work}/bert_data" --packed-data --shards 8 \
  --wiki-dump input_preprocessing/bert/sample/enwiki_sample.xml.bz2 --eval-samples 500 > "${out}/prepare.log" 2>&1
if [[ ${stages} == *data* ]]; then
  "${PYTHON}" -m perf.bench_bert --variants "${DATA_VARIANT:-compiled}" --data "${work}/bert_data" --rows 50 2>&1 |
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
  "${PYTHON}" - "${out}" "${names[@]}" <<'PY'
import json, re, sys
from pathlib import Path
out, names = Path(sys.argv[1]), sys.argv[2:]
acc, loss = {}, {}
for name in names:
    log = next((out / f"curve_{name}").glob("bert_*.log")).read_text()
    events = [json.loads(m) for m in re.findall(r":::MLLOG (\{.*\})", log)]
    acc[name] = {e["metadata"]["epoch_num"]: e["value"] for e in events if e["key"] == "eval_accuracy"}
    loss[name] = {int(s): float(v) for s, v in re.findall(r"^step \d+ samples (\d+) loss ([\d.]+)", log, re.M)}
    print(name, "backends:", {e["key"]: e["value"] for e in events if e["key"].startswith("backend_")})
ref, others = names[0], names[1:]
shared = sorted(set.intersection(*(set(acc[n]) for n in names)))
print(f"| samples | {' | '.join(f'{n} MLM accuracy' for n in names)} |\n|{'---|' * (len(names) + 1)}")
for s in shared:
    print(f"| {s} | {' | '.join(f'{acc[n][s]:.4f}' for n in names)} |")
steps = sorted(set.intersection(*(set(loss[n]) for n in names)))
print(f"training loss (samples: {' / '.join(names)}):",
      ", ".join(f"{s}: {' / '.join(f'{loss[n][s]:.3f}' for n in names)}" for s in steps))
for n in others:
    if shared:
        print(f"{n} vs {ref}: largest |accuracy difference| {max(abs(acc[n][s] - acc[ref][s]) for s in shared):.4f}")
    if steps:
        print(f"{n} vs {ref}: largest relative loss difference "
              f"{max(abs(loss[n][s] - loss[ref][s]) / loss[ref][s] for s in steps):.2%}")
(out / "curves.json").write_text(json.dumps({"accuracy": acc, "train_loss": loss}, indent=2))
PY
fi
[[ ${stages} == *runner* ]] || exit 0
# shellcheck disable=SC2086 # RUNNER_SETTINGS: VAR=value words
runner "${out}/runner" ${RUNNER_SETTINGS:-}
"${PYTHON}" - "${out}" "${DATA_VARIANT:-compiled}" <<'PY'
import json, re, sys
from pathlib import Path
out, variant = Path(sys.argv[1]), sys.argv[2]
log = next((out / "runner").glob("bert_*.log")).read_text()
stats = [json.loads(m)["value"]["throughput"] for m in re.findall(r':::MLLOG (\{.*"tracked_stats".*\})', log)]
bench = 448.74  # samples/s: stage "data" on an H100 (perf/RESULTS_ARCHIVE.md); rerun it to refresh
if (out / "bench_data.log").exists():
    bench = json.loads((out / "bench_bert.json").read_text())["runs"][variant]["samples_per_s"]
print(f"runner tracked_stats throughput per eval window: {[round(s, 1) for s in stats]}")
print(f"perf script, same shards and rows: {bench:.1f} samples/s; runner/perf: {[round(s / bench, 3) for s in stats]}")
PY
