#!/usr/bin/env bash
# Context parallelism checked end to end on 2 GPUs: the Llama trainer through the runner (perf/llama_gpu.sh's
# small model, bf16, no compile) twice from the same seed and data: CP=1 (data parallel over the 2 GPUs) and
# CP=2 (both GPUs split every sequence; ring attention). Each optimizer step sees the same sequences, so the
# two loss curves must agree to rounding. Prints both curves and their largest relative difference.
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
curves = {}
for cp in (1, 2):
    logs = sorted((out / f"cp{cp}").glob("llama31_8b_*.log"))
    text = logs[0].read_text() if logs else ""
    curves[cp] = {int(s): float(v) for s, v in re.findall(r"^step (\d+) samples \d+ loss ([\d.]+)", text, re.M)}
    evals = re.findall(r'"key": "eval_accuracy", "value": ([\d.]+)', text)
    print(f"CP={cp}: {len(curves[cp])} logged steps, eval losses {[round(float(e), 4) for e in evals]}")
steps = sorted(set(curves[1]) & set(curves[2]))
for s in steps:
    print(f"step {s}: loss CP=1 {curves[1][s]:.4f}, CP=2 {curves[2][s]:.4f}")
if steps:
    print(f"largest relative difference: {max(abs(curves[2][s] / curves[1][s] - 1) for s in steps):.2e}")
else:
    print("no common steps: a run failed (see cp1.txt / cp2.txt)")
PY
