#!/usr/bin/env bash
# Flux.1 data. Usage, inside the container (or anywhere with the repository's Python environment):
#
#   ./input_preprocessing/flux1/prepare_data.sh --outputdir /data/flux1            # MLCommons' preprocessed sets
#   ./input_preprocessing/flux1/prepare_data.sh --outputdir /data/flux_demo --sample  # the CPU default's data
#
# Full: MLCommons' CC12M subset and COCO-2014 validation subset, already run through the frozen T5-XXL,
# CLIP-L and VAE (about 2.45 TB), and the empty caption's encodings, with MLCommons' R2 downloader as the
# reference's README and AMD's run it, but from a pinned commit of the script (input_preprocessing/common/r2.py):
#   cd OUTPUTDIR; bash mlc-r2-downloader.sh https://training.mlcommons-storage.org/metadata/flux-1-cc12m-preprocessed.uri
#   (and flux-1-coco-preprocessed.uri, flux-1-empty-encodings.uri)
# Before anything is fetched the free disk is checked against what is still to come (--no-disk-check skips
# it). The downloader resumes partial files (wget --continue) and checks every file against the bucket's MD5
# list; then verify.py checks the layout the trainer reads. A re-run whose data already verifies downloads
# nothing. Then: export DATADIR=OUTPUTDIR (it holds cc12m_preprocessed/, coco_preprocessed/, empty_encodings/).
# Sample: a made-up captioned-image set in the same layout at small shapes (seconds; input_preprocessing/flux1/sample.py).
# R2_DOWNLOADER=/path/to/mlc-r2-downloader.sh uses a local copy of the downloader (tests, air-gapped mirrors).
set -euo pipefail

PYTHON=${PYTHON:-python3}

usage() {
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" # the comment block at the top
  exit "${1:-0}"
}

outputdir="" sample=0 download_flags=()
while (($#)); do
  case $1 in
    --outputdir)
      outputdir=${2:?--outputdir needs a folder}
      shift 2
      ;;
    --outputdir=*)
      outputdir=${1#*=}
      shift
      ;;
    --sample)
      sample=1
      shift
      ;;
    --no-disk-check)
      download_flags+=(--no-disk-check)
      shift
      ;;
    -h | --help) usage 0 ;;
    *)
      echo "prepare_data.sh: unknown argument $1" >&2
      usage 2
      ;;
  esac
done
[[ -n ${outputdir} ]] || {
  echo "prepare_data.sh: --outputdir is required" >&2
  usage 2
}

repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
export PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}"
mkdir -p "${outputdir}"
outputdir=$(cd "${outputdir}" && pwd)

if ((sample)); then
  "${PYTHON}" -m input_preprocessing.flux1.sample --outputdir "${outputdir}"
  "${PYTHON}" -m input_preprocessing.flux1.verify "${outputdir}"
  echo "prepare_data.sh: demo data ready; export DATADIR=${outputdir}"
  exit 0
fi

verify=("${PYTHON}" -m input_preprocessing.flux1.verify "${outputdir}")
if "${verify[@]}" >/dev/null 2>&1; then
  echo "prepare_data.sh: ${outputdir} already verified; nothing to download"
else
  "${PYTHON}" -m input_preprocessing.flux1.download --outputdir "${outputdir}" "${download_flags[@]}"
fi
"${verify[@]}"
echo "prepare_data.sh: Flux.1 data ready; export DATADIR=${outputdir}"
