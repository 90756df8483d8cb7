#!/usr/bin/env bash
# BERT-Large data-parallel scaling on one host: the compiled training step (DDP over NCCL, 48 packed rows per
# GPU) on 1, 2, ... N GPUs in one call, and the efficiency samples/s(N) / (N x samples/s(1)).
# Usage (repo root, on a machine with N GPUs): OUT=/some/dir bash perf/bert_scaling.sh [N]
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
max_gpus="${1:-$(nvidia-smi -L | wc -l)}"
export PYTHONUNBUFFERED=1 PYTHON="${PYTHON:-python3}"
counts=(1)
for ((n = 2; n <= max_gpus; n *= 2)); do counts+=("${n}"); done
for n in "${counts[@]}"; do
  "${PYTHON}" -m torch.distributed.run --standalone --nproc_per_node="${n}" perf/bench_bert.py \
    --variants compiled --steps 20 --warmup 6 2>&1 | grep -v Warn | tee "${out}/scaling_${n}gpu.log"
done
"${PYTHON}" - "${out}" "${counts[@]}" <<'PY'
import json, sys
from pathlib import Path
out, counts = Path(sys.argv[1]), [int(n) for n in sys.argv[2:]]
rate = {n: json.loads((out / ("bench_bert.json" if n == 1 else f"bench_bert_{n}gpu.json")).read_text())
        ["runs"]["compiled"]["samples_per_s"] for n in counts}
print("\n| GPUs | samples/s | per GPU | scaling efficiency |\n|---|---|---|---|")
for n in counts:
    print(f"| {n} | {rate[n]:.0f} | {rate[n] / n:.0f} | {rate[n] / (n * rate[1]):.1%} |")
PY
