#!/usr/bin/env bash
# The speed levers that are built but not yet measured, each beside its control and loss parity in the same
# call: FP8_FAST_ACCUM (the forward GEMMs with cuBLASLt's fast accumulation), FP8_MLP_ACTIVATIONS (the kept
# blocks' SwiGLU inputs in FP8: more blocks kept for the same memory) and FP8_WEIGHTS under FSDP2 (the frozen
# 70B base as FP8 shards). One stage a call (each sized to end well inside a call's 10 minutes):
#   gemm       1 GPU   perf/parts.py fp8-gemm: every FP8 GEMM shape of the 8B and 70B blocks, promoted and
#                      with fast accumulation, against the dense FP8 peak
#   llama      1 GPU   perf/bench_llama.py, 8 blocks of the 8B width: native FP8 with and without fast
#                      accumulation against eager bf16
#   bert       1 GPU   perf/bench_bert.py: the H100 config's mode with and without fast accumulation
#   lora-one   1 H200  perf/bench_lora.py, all 80 blocks on one GPU with the base stored in FP8 and the
#                      allocator's expandable segments (as the one-H200 config sets them): ACL 40 with FP8
#                      SwiGLU inputs off, against them on with 16 blocks fewer recomputed (ACL 24), with and
#                      without fast accumulation; the ACL 40 run the reference (every ACL computes the same
#                      numbers: recompute restores the dropout generators); ATTN (sdpa) the attention
#   curve40    1 H200  perf/curve_parity.py lora, 40 blocks, 20 steps, MLPerf's dropout, 5 warm-up steps,
#                      the base stored in FP8: native FP8, FP8 SwiGLU inputs (20 blocks kept) and those with
#                      fast accumulation against ours in bf16, judged against the spread of ours in bf16
#                      with two other dropout seeds (the measured noise)
#   lora-fsdp  2-8 GPUs perf/bench_lora.py under torchrun, 80 blocks: native FP8 at the first ACL of
#                      FSDP_ACL against the base as FP8 shards at both (the memory it frees spent on kept
#                      blocks): "24 12" on 4 or more GPUs (the 4 x H200 config's 24), "48 24" on 2
#   curve80    2 GPUs  perf/curve_parity.py lora under torchrun, all 80 blocks sharded, 20 steps: native FP8
#                      with the base as FP8 shards against ours in bf16 (no control: a call's time)
# Each stage writes its bench's JSON and log under $OUT/<stage>/ and prints its table last.
# Usage (repo root): OUT=/some/dir STAGES=gemm bash perf/levers_gpu.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
known="gemm llama bert lora-one curve40 lora-fsdp curve80"
stages="${STAGES:?set STAGES to one or more of: ${known}}"
for s in ${stages}; do
  [[ " ${known} " == *" ${s} "* ]] || { echo "levers_gpu.sh: unknown stage ${s} (${known})" >&2; exit 2; }
done
export PYTHONUNBUFFERED=1
gpus="$(python3 -m perf.logs gpus)"
ranks=(python3 -m torch.distributed.run --standalone)
fp8="PRECISION=fp8 FP8_BACKEND=native" # native FP8, the lever's base
status=0 # a failed stage is reported at the end; the later stages still run
stage() { [[ " ${stages} " == *" $1 "* ]]; }
run() { # run STAGE COMMAND...: the command with OUT=$out/STAGE, its log there, its table printed
  local name="$1"
  shift
  mkdir -p "${out}/${name}"
  OUT="${out}/${name}" "$@" > "${out}/${name}/${name}.log" 2>&1 || status=1
  grep -E '^\||invalid|Error|block, every GEMM' "${out}/${name}/${name}.log" || true
}
if stage gemm; then
  run gemm python3 -m perf.parts fp8-gemm
fi
if stage llama; then
  run llama "${ranks[@]}" --nproc_per_node=1 -m perf.bench_llama --layers 8 --set 'COMPILE=1 ATTENTION=sdpa' \
    --peer none --variant "fp8: ${fp8}; fastaccum: ${fp8} FP8_FAST_ACCUM=1" --steps 8 --warmup 3
fi
if stage bert; then
  run bert python3 -m perf.bench_bert --config configs/bert/config_H100_1x8x48.sh --peer none \
    --variant 'h100:' --variant 'fastaccum: FP8_FAST_ACCUM=1' --steps 20 --warmup 6
fi
if stage lora-one; then
  attn="${ATTN:-sdpa}"
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run lora-one python3 -m perf.bench_lora --layers 80 \
    --steps 3 --warmup 1 --set "COMPILE=1 ACTIVATION_CHECKPOINTING=1 ATTENTION=${attn} ${fp8} FP8_WEIGHTS=1" \
    --reference 'acl40: ACL=40' --peer none \
    --variant 'fp8act: FP8_MLP_ACTIVATIONS=1 ACL=24; fastaccum: FP8_FAST_ACCUM=1 FP8_MLP_ACTIVATIONS=1 ACL=24'
fi
if stage curve40; then
  run curve40 python3 -m perf.curve_parity lora --layers 40 --set ACTIVATION_CHECKPOINTING=1 --mlperf-regime \
    --lora-warmup 5 --steps 20 --lora-seeds 2 --lora-variant "fp8w: ${fp8} FP8_WEIGHTS=1; \
fp8act: ${fp8} FP8_WEIGHTS=1 FP8_MLP_ACTIVATIONS=1 ACL=20; \
fastaccum: ${fp8} FP8_WEIGHTS=1 FP8_FAST_ACCUM=1 FP8_MLP_ACTIVATIONS=1 ACL=20"
fi
if stage lora-fsdp; then
  read -r first second <<< "${FSDP_ACL:-$( ((gpus >= 4)) && echo "24 12" || echo "48 24")}"
  run lora-fsdp "${ranks[@]}" --nproc_per_node="${gpus}" -m perf.bench_lora --layers 80 --steps 3 --warmup 1 \
    --set "COMPILE=1 ACTIVATION_CHECKPOINTING=1 ATTENTION=flash4 ${fp8}" --reference "acl${first}: ACL=${first}" \
    --peer none --variant "fp8w-acl${first}: FP8_WEIGHTS=1 ACL=${first}; fp8w-acl${second}: FP8_WEIGHTS=1 ACL=${second}"
fi
if stage curve80; then
  run curve80 "${ranks[@]}" --nproc_per_node=2 -m perf.curve_parity lora --layers 80 --set ACTIVATION_CHECKPOINTING=1 \
    --mlperf-regime --lora-warmup 5 --steps 20 --lora-variant "fp8w: ${fp8} FP8_WEIGHTS=1" --lora-control none
fi
exit "${status}"
