#!/usr/bin/env bash
# Prepare a benchmark's data inside its image, e.g. (BERT, as in AMD's and NVIDIA's instructions):
#   ./input_preprocessing/prepare_data.sh --outputdir /bert_data --packed-data
# The image says which benchmark through BENCHMARK (default: bert); the benchmark table
# (training/benchmarks.py) names its script, and all flags go to it. -h/--help: this text, then that script's
# flags (nothing is written); a flag it does not know is refused before anything is written.
set -euo pipefail

readonly benchmark="${BENCHMARK:-bert}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly repo

script=$(cd "${repo}" && "${PYTHON:-python3}" -m training.benchmarks get "${benchmark}" prepare) || exit 2
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
  echo "BENCHMARK=${benchmark}: ${script} --help:"
  echo
fi
exec "${repo}/${script}" "$@"
