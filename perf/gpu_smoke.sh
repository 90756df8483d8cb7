#!/usr/bin/env bash
# After a change to the model, step, FP8 or attention code: on one GPU, in a few minutes, the tests that need a
# GPU (CPU CI skips them) and short benches of each benchmark's fastest mode with their loss parity against
# the bf16 reference (a variant that learns differently prints "invalid"). Not a speed measurement: a few
# blocks, a few steps.
#   tests   pytest on the GPU-only tests (LoRA's Triton kernel, FP8, bf16 weights, FlashAttention-4 where
#           importable, the fused AdamW)
#   llama   perf/bench_llama.py (under torchrun, one process), 4 blocks of the 8B width: ours bf16 and native FP8 against eager bf16
#   lora    perf/bench_lora.py, 4 blocks of the 70B width: ours bf16 and native FP8 (frozen weights in FP8
#           too) against eager bf16, and HF + peft
#   bert    perf/bench_bert.py: the H100 config's mode (native FP8, CUDA graphs, bf16 residual) against eager
# Usage (repo root): OUT=/some/dir [STAGES="tests llama lora bert"] bash perf/gpu_smoke.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
export PYTHONUNBUFFERED=1
stages="${STAGES:-tests llama lora bert}"
status=0 # a failed stage is reported at the end; the later stages still run
stage() { [[ " ${stages} " == *" $1 "* ]]; }
if stage tests; then
  python3 -m pytest -q -p no:cacheprovider tests/llama2_70b_lora/test_lora_kernel.py tests/test_fp8.py \
    tests/throughput/test_bf16_weights.py tests/llama/test_flash4.py tests/llama/test_optim.py 2>&1 |
    tee "${out}/gpu_tests.log" | tail -n 15 || status=1
fi
if stage llama; then
  mkdir -p "${out}/llama"
  OUT="${out}/llama" python3 -m torch.distributed.run --standalone --nproc_per_node=1 -m perf.bench_llama --layers 4 --set COMPILE=1 \
    --peer none --variant 'bf16:; fp8: PRECISION=fp8 FP8_BACKEND=native' \
    --steps 6 --warmup 2 2>&1 | tee "${out}/bench_llama.log" | grep -E '^\||invalid|Error' || status=1
fi
if stage lora; then
  mkdir -p "${out}/lora"
  OUT="${out}/lora" python3 -m perf.bench_lora --layers 4 \
    --set 'COMPILE=1 ACTIVATION_CHECKPOINTING=1' --peer 'peft:' --variant 'bf16:; fp8: PRECISION=fp8 FP8_BACKEND=native; \
fp8w: PRECISION=fp8 FP8_BACKEND=native FP8_WEIGHTS=1' --steps 4 --warmup 1 2>&1 |
    tee "${out}/bench_lora.log" | grep -E '^\||invalid|Error' || status=1
fi
if stage bert; then
  mkdir -p "${out}/bert"
  OUT="${out}/bert" python3 -m perf.bench_bert --config configs/bert/config_H100_1x8x48.sh --variant 'h100:' \
    --peer none --steps 12 --warmup 4 2>&1 | tee "${out}/bench_bert.log" | grep -E '^\||invalid|Error' || status=1
fi
exit "${status}"
