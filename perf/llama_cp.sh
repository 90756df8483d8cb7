#!/usr/bin/env bash
# Context parallelism checked end to end on 2 GPUs: the Llama trainer through the runner (perf/llama_gpu.sh's
# small model, bf16, no compile) twice from the same seed and data: CP=1 (data parallel over the 2 GPUs) and
# CP=2 (both GPUs split every sequence; ring attention). Each optimizer step sees the same sequences, so the
# two runs' eval losses (and step losses, means over all ranks) must agree up to bf16 rounding and the drift
# it causes. Prints both curves and their largest relative differences. About 4 minutes.
# Usage (repo root, 2 GPUs): OUT=/some/dir bash perf/llama_cp.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
for cp in 1 2; do
  NAME="cp${cp}" RUNS=1 OVERRIDES="CONTEXT_PARALLEL_SIZE=${cp} COMPILE=0 FP8=0 SEED=7 LOG_FREQ=8" \
    bash perf/llama_gpu.sh > "${out}/cp${cp}.txt" 2>&1 || echo "CP=${cp}: exit status $? (see ${out}/cp${cp}.txt)"
done
python3 - "${out}" <<'PY'
import re, sys
from pathlib import Path
out = Path(sys.argv[1])
runs = {}
for cp in (1, 2):
    logs = sorted((out / f"cp{cp}").glob("llama31_8b_*.log"))
    text = logs[0].read_text() if logs else ""
    runs[cp] = {
        "step loss": {int(s): float(v) for s, v in re.findall(r"^step (\d+) samples \d+ loss ([\d.]+)", text, re.M)},
        "eval loss": {int(s): float(v) for s, v in re.findall(r"eval at (\d+) samples: log-perplexity ([\d.]+)", text)},
    }
for what in ("eval loss", "step loss"):
    keys = sorted(set(runs[1][what]) & set(runs[2][what]))
    if not keys:
        print(f"{what}: no common points: a run failed (see cp1.txt / cp2.txt)")
        continue
    print(f"| {what} at | CP=1 | CP=2 |\n|---|---|---|")
    for k in keys:
        print(f"| {k} | {runs[1][what][k]:.4f} | {runs[2][what][k]:.4f} |")
    worst = max(abs(runs[2][what][k] / runs[1][what][k] - 1) for k in keys)
    print(f"{what}: largest relative difference {worst:.2e} over {len(keys)} points")
PY
