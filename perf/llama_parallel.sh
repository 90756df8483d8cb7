#!/usr/bin/env bash
# Parallel layouts checked end to end against plain data parallelism: the Llama trainer through the runner
# (perf/llama_gpu.sh's small model, bf16, no compile, no FP8) once per layout from the same seed and data.
# Every layout's optimizer step sees the same sequences (the global batch is fixed), so the eval losses (and
# step losses, means over all ranks) must agree with the first layout's up to bf16 rounding and the drift it
# causes. Prints each curve beside the first and the largest relative differences. About 2 minutes a layout.
# LAYOUTS: space-separated NAME or NAME=VAR=value[,VAR=value...], the first the reference; default
# "dp cp2=CONTEXT_PARALLEL_SIZE=2" (2 GPUs); on 4 GPUs for example
# "dp pp2=PIPELINE_MODEL_PARALLEL_SIZE=2 tp2=TENSOR_MODEL_PARALLEL_SIZE=2". A layout's settings come last, so
# they may also change the defaults (e.g. "native=FP8=1,FP8_BACKEND=native" against bf16).
# Usage (repo root): OUT=/some/dir [LAYOUTS=...] bash perf/llama_parallel.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
names=()
for layout in ${LAYOUTS:-dp cp2=CONTEXT_PARALLEL_SIZE=2}; do
  name="${layout%%=*}"
  settings=""
  [[ ${layout} != *=* ]] || settings="${layout#*=}"
  names+=("${name}")
  NAME="${name}" RUNS=1 OVERRIDES="COMPILE=0 FP8=0 SEED=7 LOG_FREQ=8 ${settings//,/ }" \
    bash perf/llama_gpu.sh > "${out}/${name}.txt" 2>&1 || echo "${name}: exit status $? (see ${out}/${name}.txt)"
done
python3 - "${out}" "${names[@]}" <<'PY'
import re, sys
from pathlib import Path
out, names = Path(sys.argv[1]), sys.argv[2:]
runs = {}
for name in names:
    logs = sorted((out / name).glob("llama31_8b_*.log"))
    text = logs[0].read_text() if logs else ""
    runs[name] = {
        "step loss": {int(s): float(v) for s, v in re.findall(r"^step (\d+) samples \d+ loss ([\d.]+)", text, re.M)},
        "eval loss": {int(s): float(v) for s, v in re.findall(r"eval at (\d+) samples: log-perplexity ([\d.]+)", text)},
    }
ref = names[0]
for what in ("eval loss", "step loss"):
    keys = sorted(set.intersection(*(set(r[what]) for r in runs.values())))
    if not keys:
        failed = [n for n in names if not runs[n][what]] or names
        print(f"{what}: no common points: see {', '.join(n + '.txt' for n in failed)}")
        continue
    print(f"| {what} at | {' | '.join(names)} |\n|---|{'---|' * len(names)}")
    for k in keys:
        print(f"| {k} | {' | '.join(f'{runs[n][what][k]:.4f}' for n in names)} |")
    for name in names[1:]:
        worst = max(abs(runs[name][what][k] / runs[ref][what][k] - 1) for k in keys)
        print(f"{what}: {name} vs {ref}: largest relative difference {worst:.2e} over {len(keys)} points")
PY
