#!/usr/bin/env bash
# FP8 attention (FP8_DPA=1: cuDNN's FP8 SDPA through nvidia-cudnn-frontend) on one NVIDIA GPU, beside bf16
# attention, in one call. STAGES picks, in order:
#   micro   perf/fp8_attention.py: the kernel alone at the 70B LoRA's shapes (64/8 heads of 128, 8192 tokens,
#           plain and packed rows), forward and backward, against SDPA, and its error against float32
#   lora    perf/bench_lora.py, LORA_LAYERS (40) blocks of the 70B width, LORA_STEPS (3) timed steps, native
#           FP8 with the base stored in FP8, every block recomputed: SDPA (the control and the parity
#           reference) against FP8 attention
#   curve   perf/curve_parity.py lora, CURVE_LAYERS (12) blocks, 20 steps, MLPerf's dropout, 5 warm-up steps:
#           native FP8 (base in FP8) with and without FP8 attention against ours in bf16, judged against the
#           spread of ours in bf16 with CURVE_SEEDS (2) other dropout seeds (the measured noise), the lever against
#           native FP8 alone
# Each stage writes its JSON and log under $OUT/<stage>/ and prints its table last. nvidia-cudnn-frontend must
# be importable (carried as a wheel: perf/RESULTS.md says which).
# Usage (repo root): OUT=/some/dir [STAGES="micro lora curve"] bash perf/fp8_attention_gpu.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
stages="${STAGES:-micro lora curve}"
export PYTHONUNBUFFERED=1
fp8="PRECISION=fp8 FP8_BACKEND=native" # native FP8, the control and the lever alike
status=0
run() { # run STAGE COMMAND...: the command with OUT=$out/STAGE, its log there, its table printed
  local name="$1"
  shift
  mkdir -p "${out}/${name}"
  OUT="${out}/${name}" "$@" > "${out}/${name}/${name}.log" 2>&1 || status=1
  grep -E '^\||invalid|Error|FP8 attention' "${out}/${name}/${name}.log" || true
}
if [[ " ${stages} " == *" micro "* ]]; then
  run micro python3 -m perf.fp8_attention
fi
if [[ " ${stages} " == *" lora "* ]]; then
  run lora python3 -m perf.bench_lora --layers "${LORA_LAYERS:-40}" --steps "${LORA_STEPS:-3}" --warmup 1 \
    --set "COMPILE=1 ACTIVATION_CHECKPOINTING=1 ${fp8} FP8_WEIGHTS=1" --peer none \
    --reference 'sdpa: ATTENTION=sdpa' --variant 'fp8dpa: FP8_DPA=1'
fi
if [[ " ${stages} " == *" curve "* ]]; then
  run curve python3 -m perf.curve_parity lora --layers "${CURVE_LAYERS:-12}" --set ACTIVATION_CHECKPOINTING=1 \
    --mlperf-regime --lora-warmup 5 --steps 20 --lora-seeds "${CURVE_SEEDS:-2}" \
    --lora-variant "fp8w: ${fp8} FP8_WEIGHTS=1; fp8dpa: ${fp8} FP8_WEIGHTS=1 FP8_DPA=1"
fi
exit "${status}"
