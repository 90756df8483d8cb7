#!/usr/bin/env bash
# The throughput suite's measurements on one GPU (wheels carried in .whl: torchtitan 0.2.2 and what it imports, torchao
# 0.17.0, diffusers 0.42.1; training/throughput/README.md). STAGES picks, in this order:
#   window   the sliding window on the GPU kernel against the band mask (tests/throughput/test_window.py -k gpu)
#   bench    perf/bench_throughput.py: ours against torchtitan, same shape, sequence 8192, batch 1, ROWS
#            (default Llama 3.1 8B BF16 and FP8, Mistral 7B BF16) at LAYERS blocks (default 24 of 32: the
#            full 8B's fp32 weights and AdamW state alone take 120 GiB of one GPU); VARIANTS, ours with
#            train_fsdp.py's flags ('LABEL: --flag value ...', ';'-separated, default 'ours:'), and PEERS
#            (space-separated: reference titan, the default, or none)
#   command  the user's command itself: Mistral 7B FP8 at 16 blocks, --batch_size auto, 4 steps of 4 iterations
#   flux     FLUX.1-dev at 4 double and 8 single blocks (of 19 and 38), --batch_size auto, 6 iterations
# Usage (repo root): OUT=/some/dir [STAGES="window bench"] [LAYERS=24] [ROWS=...] [VARIANTS=...] [PEERS=...]
#   bash perf/throughput_gpu.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
export PYTHONUNBUFFERED=1
stages="${STAGES:-window bench}"
run=(python3 -m torch.distributed.run --standalone --nproc_per_node=1)
read -ra peer_names <<<"${PEERS:-reference titan}"
peers=()
for peer in "${peer_names[@]}"; do peers+=(--peer "${peer}"); done
status=0  # a failed stage is reported at the end; the later stages still run
if [[ " ${stages} " == *" window "* ]]; then
  python3 -m pytest -q -p no:cacheprovider tests/throughput/test_window.py -k gpu 2>&1 | tee "${out}/window_gpu.log" || status=1
fi
if [[ " ${stages} " == *" bench "* ]]; then
  "${run[@]}" -m perf.bench_throughput --layers "${LAYERS:-24}" --rows "${ROWS:-llama8b-bf16,llama8b-fp8,mistral-bf16}" \
    --variant "${VARIANTS:-ours:}" "${peers[@]}" --steps 6 --warmup 2 2>&1 | tee "${out}/bench_throughput.log" || status=1
fi
if [[ " ${stages} " == *" command "* ]]; then
  "${run[@]}" train_fsdp.py configs/throughput/mistral-7b-v0.1.json mistral --enable_fp8 True --num_layers 16 \
    --batch_size auto --num_iteration 16 --grad_accum 4 --json "${out}/command_mistral_fp8.json" 2>&1 | tee "${out}/command.log" || status=1
fi
if [[ " ${stages} " == *" flux "* ]]; then
  "${run[@]}" train_fsdp.py configs/throughput/flux.1-dev.json flux --num_layers 4 --batch_size auto \
    --num_iteration 6 --json "${out}/command_flux.json" 2>&1 | tee "${out}/flux.log" || status=1
fi
exit "${status}"
