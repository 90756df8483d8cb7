#!/usr/bin/env bash
# Llama 3.1 8B data. Usage, inside the container (or anywhere with the repository's Python environment):
#
#   ./input_preprocessing/llama31_8b/prepare_data.sh --outputdir /data/mlperf_llama31_8b   # MLCommons' C4 + tokenizer
#   ./input_preprocessing/llama31_8b/prepare_data.sh --outputdir /data/llama_demo --sample # the CPU demo's data
#
# Full: MLCommons' preprocessed C4 (c4-train.en_6 and the 91,205-document validation file, 85.1 GB) into
# OUTPUTDIR/data and MLCommons' Llama 3.1 8B tokenizer dataset into OUTPUTDIR/model (about 32 GB: besides the
# tokenizer it holds the 8B weights, twice), with MLCommons' R2 downloader exactly as AMD's reproduction
# blog runs it, but from a pinned commit of the script (input_preprocessing/common/r2.py) instead of main:
#   bash mlc-r2-downloader.sh -d data https://training.mlcommons-storage.org/metadata/llama-3-1-8b-preprocessed-c4-dataset.uri
#   bash mlc-r2-downloader.sh -d model https://training.mlcommons-storage.org/metadata/llama-3-1-8b-tokenizer.uri
# Before anything is fetched the free disk is checked against what is still to come (about 117 GB for a
# first run; --no-disk-check skips it). The downloader resumes partial files (wget --continue) and checks every
# file against the bucket's MD5 list; afterwards verify.py checks the structure and re-checks the MD5s (cached,
# so a re-run is quick). A re-run whose data already verifies downloads nothing. Then: export DATADIR=OUTPUTDIR/data.
# Sample: the bundled Wikipedia excerpt as a C4-like indexed dataset with a small BPE tokenizer (seconds).
# R2_DOWNLOADER=/path/to/mlc-r2-downloader.sh uses a local copy of the downloader (tests, air-gapped mirrors).
set -euo pipefail

PYTHON=${PYTHON:-python3}

usage() {
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"  # the comment block at the top
  exit "${1:-0}"
}

outputdir="" sample=0 download_flags=()
while (($#)); do
  case $1 in
    --outputdir) outputdir=${2:?--outputdir needs a folder}; shift 2 ;;
    --outputdir=*) outputdir=${1#*=}; shift ;;
    --sample) sample=1; shift ;;
    --no-disk-check) download_flags+=(--no-disk-check); shift ;;
    -h | --help) usage 0 ;;
    *) echo "prepare_data.sh: unknown argument $1" >&2; usage 2 ;;
  esac
done
[[ -n ${outputdir} ]] || { echo "prepare_data.sh: --outputdir is required" >&2; usage 2; }

repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
export PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}"
mkdir -p "${outputdir}"
outputdir=$(cd "${outputdir}" && pwd)

if ((sample)); then
  "${PYTHON}" -m input_preprocessing.llama31_8b.sample --outputdir "${outputdir}"
  echo "prepare_data.sh: demo data ready; export DATADIR=${outputdir}"
  exit 0
fi

verify=("${PYTHON}" -m input_preprocessing.llama31_8b.verify --datadir "${outputdir}/data" --md5 --tokenizer "${outputdir}/model")
if "${verify[@]}" >/dev/null 2>&1; then
  echo "prepare_data.sh: ${outputdir}/data already verified; nothing to download"
else
  "${PYTHON}" -m input_preprocessing.llama31_8b.download --outputdir "${outputdir}" "${download_flags[@]}"
fi
"${verify[@]}"
echo "prepare_data.sh: C4 ready; export DATADIR=${outputdir}/data"
