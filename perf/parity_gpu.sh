#!/usr/bin/env bash
# Loss parity and convergence measurements on one GPU, by STAGES (wheels carried in .whl: torchao, mlperf-logging, megatron-core;
# the small defaults' data carried in .conv_data/{llama,bert,lora}, prepared on the CPU with each benchmark's
# `prepare_data.sh --sample` / demo command):
#   tests     the CPU tests of the build, FP8 calibration and parity verdicts, on this machine
#   curves    perf/curve_parity.py: ours against Hugging Face (+ peft), 50 steps, bf16 and FP8 (CURVE_PARTS)
#   converge  python -m training.convergence for each benchmark's fastest mode, SEEDS seeds (CONVERGE)
#   lora      perf/bench_lora.py with loss parity at LORA_LAYERS blocks (the rows of the FP8_WEIGHTS bug), once
#             per row source in LORA_TEXTS (its --text: stream, the default; row; random), LORA_PROFILE kernels;
#             LORA_VARIANTS: its variants ('LABEL: NAME=VALUE ...', ';'-separated, perf/lib/overrides.py)
#   bert      perf/bench_bert.py with loss parity, BERT_VARIANTS, and the top GPU kernels of each (--profile)
#   llama     perf/bench_llama.py with loss parity at LLAMA_LAYERS blocks of the 8B, LLAMA_VARIANTS (as
#             LORA_VARIANTS), profiled
# Each bench stage stops after STAGE_LIMIT seconds (default 590), so that a slow one leaves time to the next.
# Usage (repo root): OUT=/some/dir [STAGES="tests curves"] bash perf/parity_gpu.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
export PYTHONUNBUFFERED=1
stages="${STAGES:-tests curves}"
status=0  # a failed stage is reported at the end; the later stages still run
if [[ " ${stages} " == *" tests "* ]]; then
  python3 -m pytest -q -p no:cacheprovider tests/llama/test_build.py tests/test_fp8.py tests/test_parity.py \
    2>&1 | tail -n 5 || status=1
fi
if [[ " ${stages} " == *" curves "* ]]; then
  read -r -a parts <<<"${CURVE_PARTS:-lora llama bert}"
  python3 -m perf.curve_parity "${parts[@]}" --steps "${CURVE_STEPS:-50}" 2>&1 | tee "${out}/curve_parity.log" |
    grep -v '^  [a-z]*: {' || status=1
fi
if [[ " ${stages} " == *" converge "* ]]; then
  for bench in ${CONVERGE:-llama31_8b bert llama2_70b_lora}; do
    case "${bench}" in
      llama31_8b) mode=(--config configs/llama31_8b/config_H200_1x8x1_8b.sh) data=.conv_data/llama ;;
      bert) mode=(--set PRECISION=fp8 --set FP8_BACKEND=native --set COMPILE=1 --set RESIDUAL_DTYPE=bf16)
        data=.conv_data/bert ;;
      llama2_70b_lora) mode=(--config configs/llama2_70b_lora/config_H200_1x8x1.sh) data=.conv_data/lora ;;
      *) echo "parity_gpu.sh: no convergence stage for ${bench}" >&2 && exit 2 ;;
    esac
    work="${TMPDIR:-/tmp}/convergence_${bench}_$$"  # logs stay there; the report and plot come back
    python3 -m training.convergence "${bench}" --datadir "${data}" "${mode[@]}" --seeds "${SEEDS:-3}" \
      --out "${work}" 2>&1 | tee -a "${out}/convergence.log" || status=1
    cp "${work}/convergence.json" "${out}/convergence_${bench}.json" || status=1
    cp "${work}/convergence.png" "${out}/convergence_${bench}.png" || status=1
  done
fi
if [[ " ${stages} " == *" lora "* ]]; then
  for text in ${LORA_TEXTS:-stream}; do
    timeout "${STAGE_LIMIT:-590}" python3 -m perf.bench_lora --layers "${LORA_LAYERS:-20}" --steps 4 \
      --warmup 1 --text "${text}" --profile "${LORA_PROFILE:-0}" \
      --set 'COMPILE=1 ACTIVATION_CHECKPOINTING=1' --peer 'peft:' --variant "${LORA_VARIANTS:-bf16:; \
fp8: PRECISION=fp8 FP8_BACKEND=native; fp8w: PRECISION=fp8 FP8_BACKEND=native FP8_WEIGHTS=1}" 2>&1 |
      tee "${out}/bench_lora_${text}.log" | grep -v '^  [a-z0-9-]*: {' || status=1
    mv "${out}/bench_lora.json" "${out}/bench_lora_${text}.json" || status=1
  done
fi
if [[ " ${stages} " == *" bert "* ]]; then
  timeout "${STAGE_LIMIT:-590}" python3 -m perf.bench_bert --steps 20 --warmup 6 --profile \
    --variant "${BERT_VARIANTS:-compiled: COMPILE=1; \
h100: COMPILE=1 COMPILE_MODE=reduce-overhead PRECISION=fp8 FP8_BACKEND=native RESIDUAL_DTYPE=bf16}" 2>&1 |
    tee "${out}/bench_bert.log" | grep -v '^  [a-z0-9_:-]*: {' || status=1
fi
if [[ " ${stages} " == *" llama "* ]]; then
  timeout "${STAGE_LIMIT:-590}" python3 -m torch.distributed.run --standalone --nproc_per_node=1 \
    -m perf.bench_llama --layers "${LLAMA_LAYERS:-6}" --steps 6 --warmup 2 --profile \
    --set 'COMPILE=1 ATTENTION=sdpa' --peer 'hf-bf16:' \
    --variant "${LLAMA_VARIANTS:-bf16:; fp8: PRECISION=fp8 FP8_BACKEND=native}" 2>&1 |
    tee "${out}/bench_llama.log" | grep -v '^  [a-z0-9_-]*: {' || status=1
fi
exit "${status}"
