#!/usr/bin/env bash
# BERT-Large data-parallel scaling on one host: the compiled training step (DDP over NCCL, 48 packed rows per
# GPU) on 1, 2, ... N GPUs in one call, and the efficiency samples/s(N) / (N x samples/s(1)).
# VARIANT: the bench_bert.py variant's overrides (default COMPILE=1; e.g. the H100 config's mode,
# "COMPILE=1 PRECISION=fp8 FP8_BACKEND=native RESIDUAL_DTYPE=bf16").
# Usage (repo root): OUT=/some/dir [VARIANT=...] bash perf/bert_scaling.sh [GPU COUNTS...] (default 1 2 4 .. all)
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
export PYTHONUNBUFFERED=1 PYTHON="${PYTHON:-python3}" VARIANT="${VARIANT:-COMPILE=1}"
counts=("$@")
if ((${#counts[@]} == 0)); then
  counts=(1)
  for ((n = 2; n <= $(nvidia-smi -L | wc -l); n *= 2)); do counts+=("${n}"); done
fi
[[ ${counts[0]} == 1 ]] || { echo "bert_scaling.sh: the first count must be 1 (the baseline)" >&2; exit 2; }
for n in "${counts[@]}"; do
  "${PYTHON}" -m torch.distributed.run --standalone --nproc_per_node="${n}" -m perf.bench_bert \
    --variant "scaled: ${VARIANT}" --reference none --peer none --steps 20 --warmup 6 2>&1 | grep -v Warn | tee "${out}/scaling_${n}gpu.log"
done
"${PYTHON}" -m perf.logs scaling "${out}" scaled "${counts[@]}"
