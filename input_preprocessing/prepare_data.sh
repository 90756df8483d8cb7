#!/usr/bin/env bash
# Prepare a benchmark's data inside its image, e.g. (BERT, as in AMD's and NVIDIA's instructions):
#   ./input_preprocessing/prepare_data.sh --outputdir /bert_data --packed-data
# The image says which benchmark through BENCHMARK (default: bert); all flags go to that benchmark's script.
set -euo pipefail

readonly benchmark="${BENCHMARK:-bert}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly here

case "${benchmark}" in
  bert) exec "${here}/bert/prepare_data.sh" "$@" ;;
  llama31_8b) exec "${here}/llama/prepare_data.sh" "$@" ;;
  *)
    echo "prepare_data.sh: BENCHMARK=${benchmark} has no data preparation here (known: bert, llama31_8b)" >&2
    exit 2
    ;;
esac
