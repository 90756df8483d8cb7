#!/usr/bin/env bash
# Llama 2 70B LoRA data and model. Inside the llama70b image (BENCHMARK=llama2_70b_lora), as the issue's command:
#
#   docker run -it -e HF_TOKEN -v /data/mlperf_llama2:/data mlperf/llama70b \
#     ./input_preprocessing/prepare_data.sh --outputdir /data          # GovReport + Llama 2 70B, about 139 GB
#   ./input_preprocessing/prepare_data.sh --outputdir /data/lora_demo --sample --seq-len 256   # the CPU default
#
# Writes OUTPUTDIR/data/{train,validation}.npy + meta.json and OUTPUTDIR/model/; then export DATADIR=OUTPUTDIR.
# The work (downloads, checksums, conversion, the sample) is input_preprocessing/llama2_70b_lora/prepare.py;
# --help lists its flags.
set -euo pipefail

repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
export PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}"
module=input_preprocessing.llama2_70b_lora.prepare
for arg in "$@"; do
  if [[ ${arg} == -h || ${arg} == --help ]]; then
    module=input_preprocessing.llama2_70b_lora.flags  # the flags alone: standard library only
  fi
done
exec "${PYTHON:-python3}" -m "${module}" "$@"
