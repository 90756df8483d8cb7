#!/usr/bin/env bash
# The Llama trainer itself on the GPU(s), through the runner (run_with_docker.sh, CONTAINER_RUNTIME=none):
# data made from the bundled excerpt by the real pipeline, a mid-size Llama (NOT the 8B: no C4 here) built
# from the CPU default's config (its 256-token sequences and 1,024 eval samples) with bf16, FP8 (torchao or TE), compiled blocks and FSDP2 over every GPU,
# NEXP=2, scored and compliance-checked. Prints the runs' eval losses, throughput and the summary.
# Host tunables are not touched (TUNABLES_ROOT points at an empty folder).
# Usage (repo root): OUT=/some/dir bash perf/llama_gpu.sh
set -euo pipefail
out="${OUT:?set OUT to a folder for the results}"
export PYTHONUNBUFFERED=1
work="$(mktemp -d)"
gpus="$(python3 -c 'import torch; print(torch.cuda.device_count())')"
./input_preprocessing/llama/prepare_data.sh --outputdir "${work}/llama_data" --sample > "${out}/llama_prepare.log" 2>&1
config="${work}/config_GPU_1x${gpus}x4.sh"
{
  sed -e "s/DGXNGPU=1/DGXNGPU=${gpus}/; s/PRECISION=fp32/PRECISION=bf16/; s/MLPERF_SUBMISSION_PLATFORM=CPU/MLPERF_SUBMISSION_PLATFORM=GPU/" \
    configs/llama31_8b/config_CPU_1x1x1_8b.sh
  echo "export NUM_LAYERS=4 HIDDEN_SIZE=1024 FFN_HIDDEN_SIZE=3584 NUM_ATTENTION_HEADS=16 NUM_QUERY_GROUPS=4"
  echo "export GBS=$((8 * gpus)) MBS=8 MAX_LR=1e-3 WARMUP_STEPS=8"
  echo "export EVAL_EVERY=$((128 * gpus)) MAX_SAMPLES_TERMINATION=$((4096 * gpus))"
  echo "export FP8=1 COMPILE=1 SYNTHETIC_WARMUP_STEPS=2 NUM_WORKERS=2"
} > "${config}"
status=0
(
  # shellcheck disable=SC1090
  source "${config}"
  export CONFIG_FILE="${config}" DATADIR="${work}/llama_data" LOGDIR="${out}/llama_runner" NEXP=2
  export CONTAINER_RUNTIME=none CLEAR_CACHES=0 TUNABLES_ROOT="${work}/no_host_tunables"
  mkdir -p "${TUNABLES_ROOT}"
  bash run_with_docker.sh
) > "${out}/llama_runner.log" 2>&1 || status=$?
grep -h -o '"key": "\(eval_accuracy\|tracked_stats\|run_stop\|backend_[a-z_]*\)".*' "${out}"/llama_runner/*.log |
  cut -c1-160 || true
tail -n 25 "${out}/llama_runner.log"
echo "runner exit status ${status}"
