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
compared=()
for name in "${names[@]}"; do compared+=("${name}=${out}/${name}"); done
python3 -m perf.logs compare "${compared[@]}"
