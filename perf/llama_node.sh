#!/usr/bin/env bash
# Llama 3.1 8B on every GPU of this machine (4 x H200 asked), full 8B, sequence 8192, micro-batch 1
# per GPU, FSDP2, compiled blocks. torchtitan 0.2.2 and its imports are carried as wheels in .whl and installed
# beforehand (training/throughput/README.md). STAGES picks, in this order:
#   hf      perf/bench_llama.py: the Hugging Face peer (BF16) against ours in BF16 and native FP8 (the fastest
#           FP8 mode: fused FP8 MLP, FP8 all-gather, Triton AdamW), blocks kept gathered, one micro-batch a step
#   titan   perf/bench_throughput.py --layers 32: ours against torchtitan's Llama 3.1 8B in BF16 and FP8 (its
#           float8), same shape, both resharding after forward (torchtitan's default); TITAN_VARIANTS (ours with
#           train_fsdp.py's flags, 'LABEL: --flag value ...' ';'-separated, default 'ours:'), PEERS (space-separated:
#           reference titan, the default, or none), TITAN_STEPS (timed steps, default 6), LR_WARMUP (the parity
#           schedule's warm-up, default 10), MBS (rows a GPU, default 1)
#   accum   perf/bench_llama.py with the trainer's accumulation (GBS 16 / GPUs micro-batches a step), ours FP8
#           (ACCUM_VARIANTS, 'LABEL: NAME=VALUE ...' ';'-separated, default native FP8 with the blocks kept
#           gathered; ACCUM_REFERENCE, the parity reference, default the bench's; ACCUM_SET, the settings of
#           all of them, default 'COMPILE=1 ATTENTION=sdpa': on 80 GB cards add REDUCE_EACH_MICRO_BATCH=1, the
#           float32 gradients held between micro-batches and the kept blocks do not fit there; ATTENTION=flash4:
#           FlashAttention-4)
#   runner  perf/llama_gpu.sh SIZE=8b: the 8B trainer through run_with_docker.sh with config_H200_1x8x1_8b.sh
#           adapted to the GPUs; its tracked_stats to set beside the bench's
# PROFILE=N (default 0): the benches also print each variant's top GPU kernels (N of them in bench_throughput).
# Usage (repo root): OUT=/some/dir [STAGES="hf titan accum runner"] [PROFILE=N] bash perf/llama_node.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
export PYTHONUNBUFFERED=1
stages="${STAGES:-hf titan accum runner}"
gpus="$(python3 -m perf.logs gpus)"
run=(python3 -m torch.distributed.run --standalone --nproc_per_node="${gpus}")
profile="${PROFILE:-0}"
[[ ${profile} =~ ^[0-9]+$ ]] || { echo "llama_node.sh: PROFILE=${profile} is not a whole number" >&2; exit 2; }
llama_profile=()
[[ ${profile} == 0 ]] || llama_profile=(--profile)
read -ra peer_names <<<"${PEERS:-reference titan}"
peers=()
for peer in "${peer_names[@]}"; do peers+=(--peer "${peer}"); done
status=0  # a failed stage is reported at the end; the later stages still run
if [[ " ${stages} " == *" hf "* ]]; then
  OUT="${out}" "${run[@]}" -m perf.bench_llama --set 'COMPILE=1 ATTENTION=sdpa' --peer 'hf-bf16:' \
    --variant 'bf16-keep: RESHARD_AFTER_FORWARD=0; fp8-keep: RESHARD_AFTER_FORWARD=0 PRECISION=fp8 FP8_BACKEND=native' \
    --steps 6 --warmup 2 2>&1 | tee "${out}/bench_llama.log" || status=1
fi
if [[ " ${stages} " == *" titan "* ]]; then
  OUT="${out}" "${run[@]}" -m perf.bench_throughput --layers 32 --rows "${ROWS:-llama8b-bf16,llama8b-fp8}" \
    --variant "${TITAN_VARIANTS:-ours:}" "${peers[@]}" --steps "${TITAN_STEPS:-6}" --warmup 2 --lr-warmup "${LR_WARMUP:-10}" \
    --mbs "${MBS:-1}" --profile "${profile}" 2>&1 | tee "${out}/bench_throughput.log" || status=1
fi
if [[ " ${stages} " == *" accum "* ]]; then
  mkdir -p "${out}/accum"
  OUT="${out}/accum" "${run[@]}" -m perf.bench_llama --set "${ACCUM_SET:-COMPILE=1 ATTENTION=sdpa}" --peer none \
    --variant "${ACCUM_VARIANTS:-fp8-keep: RESHARD_AFTER_FORWARD=0 PRECISION=fp8 FP8_BACKEND=native}" --accum $((16 / gpus)) \
    ${ACCUM_REFERENCE:+--reference "${ACCUM_REFERENCE}"} \
    --steps 4 --warmup 1 "${llama_profile[@]}" 2>&1 | tee "${out}/bench_llama_accum.log" || status=1
fi
if [[ " ${stages} " == *" runner "* ]]; then
  OUT="${out}" SIZE=8b bash perf/llama_gpu.sh 2>&1 | tail -n 40 || status=1
fi
exit "${status}"
