#!/usr/bin/env bash
# The v6.0 4-bit recipes through the local convergence check (training/convergence.py) on one GPU: the small
# defaults' data made here (--sample), then three checks side by side on the one GPU, each SEEDS runs of the
# bf16 reference and SEEDS of the recipe:
#   lora_mxfp4   AMD's LoRA recipe: MXFP4 with the Hadamard rotation, FP8 delayed scaling from HEALING_ITER
#   lora_nvfp4   NVIDIA's LoRA recipe: NVFP4 (RHT and 2D quantization off), FP8 from HEALING_ITER
#   8b_mxfp4     AMD's 8B recipe: MXFP4 with the Hadamard rotation throughout, an FP8 warm-up
# JOBS runs of each check at once (toy models leave the GPU mostly idle). Each check writes
# convergence.{md,json,png} under $OUT/<check>/ and its runs' logs in $OUT/<check>/logs.tar.gz; the verdicts
# print last.
# Usage (repo root): OUT=/some/dir [SEEDS=10] [JOBS=4] [HEALING_ITER=40] bash perf/fp4_convergence_gpu.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
seeds="${SEEDS:-10}"
jobs="${JOBS:-4}"
heal="${HEALING_ITER:-40}"
data="${DATA:-/tmp/fp4_convergence_data}"
work="$(mktemp -d)"
export PYTHONUNBUFFERED=1 PYTHON="${PYTHON:-python3}"
mkdir -p "${out}"
if [[ ! -f "${data}/lora/.prepared" ]]; then
  rm -rf "${data}/lora"
  BENCHMARK=llama2_70b_lora bash input_preprocessing/prepare_data.sh --outputdir "${data}/lora" --sample \
    --seq-len 256 > "${out}/prepare_lora.log" 2>&1
  touch "${data}/lora/.prepared"
fi
if [[ ! -f "${data}/llama/.prepared" ]]; then
  rm -rf "${data}/llama"
  bash input_preprocessing/llama31_8b/prepare_data.sh --outputdir "${data}/llama" --sample \
    > "${out}/prepare_llama.log" 2>&1
  touch "${data}/llama/.prepared"
fi
check() { # check NAME BENCHMARK DATADIR SETTINGS...: one convergence check in the background
  local name="$1" bench="$2" dir="$3"
  shift 3
  local sets=()
  for s in "$@"; do sets+=(--set "${s}"); done
  "${PYTHON}" -m training.convergence "${bench}" --datadir "${dir}" --seeds "${seeds}" --jobs "${jobs}" \
    "${sets[@]}" --out "${work}/${name}" > "${out}/${name}.log" 2>&1 &
}
check lora_mxfp4 llama2_70b_lora "${data}/lora" FP4=True FP4_RECIPE=mxfp4 NVTE_MXFP4_USE_HADAMARD=1 \
  "HEALING_ITER=${heal}" HEALING_PRECISION=FP8_DS
check lora_nvfp4 llama2_70b_lora "${data}/lora" FP4=True FP4_RECIPE=nvfp4 NVTE_NVFP4_DISABLE_RHT=1 \
  NVTE_NVFP4_DISABLE_2D_QUANTIZATION=1 "HEALING_ITER=${heal}" HEALING_PRECISION=FP8_DS
check 8b_mxfp4 llama31_8b "${data}/llama" FP4=True FP4_RECIPE=mxfp4 NVTE_MXFP4_USE_HADAMARD=1 \
  WARMUP_RECIPE=fp8_hybrid
status=0
for _ in 1 2 3; do wait -n || status=1; done
for name in lora_mxfp4 lora_nvfp4 8b_mxfp4; do
  mkdir -p "${out}/${name}"
  cp "${work}/${name}"/convergence.* "${out}/${name}/" 2> /dev/null || true
  tar -czf "${out}/${name}/logs.tar.gz" -C "${work}" "${name}"
  echo "== ${name}"
  tail -n 4 "${out}/${name}.log"
done
exit "${status}"
