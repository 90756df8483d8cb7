#!/usr/bin/env bash
# Prepare a benchmark's data inside its image, e.g. (BERT, as in AMD's and NVIDIA's instructions):
#   ./input_preprocessing/prepare_data.sh --outputdir /bert_data --packed-data
# The image says which benchmark through BENCHMARK (default: bert); the benchmark table
# (training/benchmarks.py) names its script, and all flags go to it.
set -euo pipefail

readonly benchmark="${BENCHMARK:-bert}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly repo

script=$(cd "${repo}" && "${PYTHON:-python3}" -m training.benchmarks get "${benchmark}" prepare) || exit 2
exec "${repo}/${script}" "$@"
