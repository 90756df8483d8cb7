#!/usr/bin/env bash
# Activation offloading (ACTIVATION_OFFLOAD_LAYERS) against recomputation, the one-GPU Llama 2 70B LoRA
# config's mode (config_H200_1x1x8.sh: native FP8, frozen weights and SwiGLU inputs in FP8), one call:
#   a GPU with 120 GB or more (an H200): all 80 blocks, the config as shipped (ACL=24: 24 blocks recomputed)
#     against the same 24 blocks offloaded instead (ACL=0 ACTIVATION_OFFLOAD_LAYERS=24);
#   a smaller one (an H100): LAYERS blocks (40), the last 8 kept on the GPU, the others recomputed (the
#     reference) against OFFLOAD of them (16) offloaded instead, and (KEEP=1, the default) kept on the GPU
#     instead (what offloading would reach with copies for free).
# Each variant's losses are compared with the reference's (perf/lib/parity.py). Prints the table last; the
# JSON and log go under $OUT, with the host link's measured rate each way (host_link.txt).
# Usage (repo root): OUT=/some/dir [LAYERS=40 OFFLOAD=16 KEEP=1 STEPS=6] bash perf/offload_gpu.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
config=configs/llama2_70b_lora/config_H200_1x1x8.sh
memory_gib="$(python3 -c 'import torch; print(torch.cuda.get_device_properties(0).total_memory >> 30)')"
if ((memory_gib >= 120)); then
  args=(--layers 80 --reference 'shipped: ACL=24' --variant 'offload24: ACL=0 ACTIVATION_OFFLOAD_LAYERS=24')
else
  layers="${LAYERS:-40}" moved="${OFFLOAD:-16}"
  [[ ${layers} =~ ^[0-9]+$ ]] || { echo "offload_gpu.sh: LAYERS=${layers} is not a whole number" >&2; exit 2; }
  [[ ${moved} =~ ^[0-9]+$ ]] || { echo "offload_gpu.sh: OFFLOAD=${moved} is not a whole number" >&2; exit 2; }
  ((layers >= moved + 8)) || { echo "offload_gpu.sh: LAYERS=${layers} must be OFFLOAD=${moved} + 8 or more" >&2; exit 2; }
  recomputed=$((layers - 8)) rest=$((layers - 8 - moved))
  variants="offload${moved}: ACL=${rest} ACTIVATION_OFFLOAD_LAYERS=${moved}"
  [[ ${KEEP:-1} == 1 ]] && variants+="; keep$((layers - rest)): ACL=${rest}"
  args=(--layers "${layers}" --reference "recompute${recomputed}: ACL=${recomputed}" --variant "${variants}")
fi
# The host link's rate each way, pinned memory (what the offloaded blocks' copies run at, at best).
python3 - <<'PY' | tee "${out}/host_link.txt"
import torch
gpu = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
host = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
for name, dst, src in (("device to host", host, gpu), ("host to device", gpu, host)):
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        dst.copy_(src, non_blocking=True)
    end.record()
    end.synchronize()
    print(f"host link, {name}: {5 * (1 << 30) / start.elapsed_time(end) / 1e6:.1f} GB/s (1 GiB pinned copies)")
PY
status=0
OUT="${out}" python3 -m perf.bench_lora --config "${config}" "${args[@]}" --peer none --steps "${STEPS:-6}" \
  --warmup 2 > "${out}/bench_lora_offload.log" 2>&1 || status=$?
grep -o '"ac": "[^"]*"\|"kept_after_forward_gib": [0-9.]*' "${out}/bench_lora_offload.log" || true
grep -v Warn "${out}/bench_lora_offload.log" | tail -n 6
exit "${status}"
