#!/usr/bin/env bash
# MLPerf BERT data preparation; the logic is in input_preprocessing/bert/prepare.py.
#   input_preprocessing/bert/prepare_data.sh --outputdir /bert_data --packed-data   # MLCommons data
#   input_preprocessing/bert/prepare_data.sh --outputdir /tmp/bert_demo --packed-data --shards 8 \
#       --wiki-dump input_preprocessing/bert/sample/enwiki_sample.xml.bz2 --eval-samples 1500   # bundled sample
# Flags: --help. Python: $PYTHON, else python3 from PATH.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly repo
readonly python="${PYTHON:-python3}"

if ! command -v "${python}" >/dev/null 2>&1; then
  echo "prepare_data.sh: Python interpreter '${python}' not found (set PYTHON)" >&2
  exit 2
fi
export PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}"
for arg in "$@"; do
  if [[ ${arg} == -h || ${arg} == --help ]]; then  # the flags alone: standard library only
    exec "${python}" -m input_preprocessing.bert.flags "$@"
  fi
done
if ! "${python}" -c 'import h5py, numpy' 2>/dev/null; then
  echo "prepare_data.sh: ${python} lacks h5py or numpy (pip install -r requirements.txt, or set PYTHON)" >&2
  exit 2
fi

exec "${python}" -m input_preprocessing.bert.prepare "$@"
