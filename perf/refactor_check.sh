#!/usr/bin/env bash
# Issue 18's check that the refactor kept the speed: the same benchmarks on the tree before it (OLD, a copy of
# commit b611619's training/ and perf/, carried in .old) and on this tree, one after the other in one call.
#   OUT=... bash perf/refactor_check.sh        (on one GPU; about 5 minutes)
set -euo pipefail
out=${OUT:-/tmp/refactor_check}
old=${OLD:-.old}
mkdir -p "${out}"
[[ -d ${old}/training ]] || { echo "refactor_check.sh: OLD=${old} holds no training/ (the tree to compare)" >&2; exit 2; }
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
run() { # run TREE NAME COMMAND...
  local tree=$1 name=$2
  shift 2
  echo "== ${name}"
  (cd "${tree}" && "$@") >"${out}/${name}.log" 2>&1 || echo "${name} failed (exit $?), see ${name}.log"
  grep -E "^\| " "${out}/${name}.log" || echo "(no table in ${name}.log)"
}
for tree in "${old}" .; do
  tag=$([[ ${tree} == . ]] && echo new || echo old)
  run "${tree}" "bert_${tag}" python -m perf.bench_bert --variants compiled_fp8native_bf16res --steps 20 --warmup 6
  run "${tree}" "llama_${tag}" python -m torch.distributed.run --standalone --nproc_per_node=1 -m perf.bench_llama \
    --variants ours-bf16,ours-fp8native --layers 8 --steps 10 --warmup 3
done
