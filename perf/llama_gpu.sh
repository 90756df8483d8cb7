#!/usr/bin/env bash
# The Llama trainer itself on the GPU(s), through the runner (run_with_docker.sh, CONTAINER_RUNTIME=none),
# on data made from the bundled excerpt by the real pipeline (no C4 here), FSDP2 over every GPU:
#   SIZE=small (default): a 4-layer Llama from the CPU default's config (its 256-token sequences and 1,024
#     eval samples) with bf16 + FP8 and compiled blocks, NEXP=2 to the demo target, scored and
#     compliance-checked;
#   SIZE=8b: the full 8B at 8192 tokens with config_H200_1x8x1_8b.sh's settings (GBS 16, MBS 1, FP8, compiled
#     blocks, blocks kept gathered) on this machine's GPUs, 20 steps (32 eval sequences: the excerpt holds no
#     more), NEXP=1: the trainer's own tracked_stats throughput in tokens/s per GPU, to set beside
#     perf/bench_llama.py's.
# OVERRIDES="VAR=value ..." are appended to the config; NAME (default llama_runner) names the results folder;
# RUNS sets NEXP for SIZE=small (default 2).
# Host tunables are not touched (TUNABLES_ROOT points at an empty folder).
# Usage (repo root): OUT=/some/dir [SIZE=8b] [OVERRIDES=...] [NAME=...] bash perf/llama_gpu.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
export PYTHONUNBUFFERED=1
work="$(mktemp -d)"
gpus="$(python3 -m perf.logs gpus)"
./input_preprocessing/llama31_8b/prepare_data.sh --outputdir "${work}/llama_data" --sample > "${out}/llama_prepare.log" 2>&1
nexp="${RUNS:-2}"
if [[ ${SIZE:-small} == 8b ]]; then
  nexp=1
  config="${work}/config_H200_1x${gpus}x1_8b.sh"
  {
    sed -e "s/DGXNGPU=8/DGXNGPU=${gpus}/" configs/llama31_8b/config_H200_1x8x1_8b.sh
    echo "export CPU_DEMO=1 TRAIN_DATA_PREFIX=wiki-train_text_document VALID_DATA_PREFIX=wiki-validation_text_document"
    echo "export EVAL_EVERY=160 EVAL_SAMPLES=32 MAX_SAMPLES_TERMINATION=320"
  } > "${config}"
else
  config="${work}/config_GPU_1x${gpus}x4.sh"
  {
    sed -e "s/DGXNGPU=1/DGXNGPU=${gpus}/; s/PRECISION=fp32/PRECISION=bf16/; s/MLPERF_SUBMISSION_PLATFORM=CPU/MLPERF_SUBMISSION_PLATFORM=GPU/" \
      configs/llama31_8b/config_CPU_1x1x1_8b.sh
    echo "export NUM_LAYERS=4 HIDDEN_SIZE=1024 FFN_HIDDEN_SIZE=3584 NUM_ATTENTION_HEADS=16 NUM_QUERY_GROUPS=4"
    echo "export GBS=$((8 * gpus)) MBS=8 MAX_LR=1e-3 WARMUP_STEPS=8"
    echo "export EVAL_EVERY=$((128 * gpus)) MAX_SAMPLES_TERMINATION=$((4096 * gpus))"
    echo "export FP8=1 COMPILE=1 SYNTHETIC_WARMUP_STEPS=2 NUM_WORKERS=2"
  } > "${config}"
fi
[[ -z ${OVERRIDES:-} ]] || echo "export ${OVERRIDES}" >> "${config}"
name="${NAME:-llama_runner}"
status=0
(
  # shellcheck disable=SC1090
  source "${config}"
  export CONFIG_FILE="${config}" DATADIR="${work}/llama_data" LOGDIR="${out}/${name}" NEXP="${nexp}"
  export CONTAINER_RUNTIME=none CLEAR_CACHES=0 TUNABLES_ROOT="${work}/no_host_tunables"
  mkdir -p "${TUNABLES_ROOT}"
  bash run_with_docker.sh
) > "${out}/${name}.log" 2>&1 || status=$?
grep -h -o '"key": "\(eval_accuracy\|tracked_stats\|run_stop\|backend_[a-z_]*\)".*' "${out}/${name}"/*.log |
  cut -c1-160 || true
tail -n 25 "${out}/${name}.log"
echo "runner exit status ${status}"
python3 -m perf.logs throughput "${out}/${name}" --gpus "${gpus}"
