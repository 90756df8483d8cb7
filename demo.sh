#!/usr/bin/env bash
# The small default, end to end on the CPU (a few minutes on 2 cores):
#   1. set up ./.venv (first time only),
#   2. prepare BERT data from the bundled Wikipedia excerpt with the real pipeline (first time only),
#   3. run the CPU-sized BERT config NEXP=2 times through run_with_docker.sh without a container,
#   4. print the scored summary.
# A tiny model with a lower target: the logs and summary say it is NOT a valid MLPerf result. The config sets
# CPU_DEMO=1, so the launcher leaves this machine's kernel settings alone (no runtime_tunables.sh).
# Usage: ./demo.sh (no arguments; -h/--help: this text).
# Variables: DEMO_DIR (default ./demo), NEXP (default 2).
set -euo pipefail

# -h/--help prints the comment block above; any other argument is refused before anything is read or written.
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^[^#]/{/^#SBATCH/d;/^# shellcheck/d;/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
  exit 0
fi
if (($# > 0)); then
  echo "demo.sh: error: unknown argument ${1}: it takes none (DEMO_DIR and NEXP come from the environment);" \
    "see --help" >&2
  exit 2
fi
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
# shellcheck source=scripts/venv.sh
source scripts/venv.sh

# shellcheck source=configs/bert/config_CPU_1x1x10.sh
source configs/bert/config_CPU_1x1x10.sh
demo_dir="${DEMO_DIR:-${PWD}/demo}"
# rows of the config's length: a folder made for another length is not reused
data="${demo_dir}/bert_data_seq${MAX_SEQ_LENGTH}"
sample=input_preprocessing/bert/sample
if ! python -m input_preprocessing.bert.verify "${data}" >/dev/null 2>&1; then
  echo "== preparing ${data} from the bundled Wikipedia excerpt"
  ./input_preprocessing/prepare_data.sh --outputdir "${data}" --packed-data --wiki-dump "${sample}/enwiki_sample.xml.bz2" \
    --vocab "${sample}/bert_uncased_vocab.txt" --shards 8 --eval-samples 500 \
    --max-seq-length "${MAX_SEQ_LENGTH}" --max-predictions-per-seq "${MAX_PREDICTIONS_PER_SEQ}"
fi

echo "== running the small default"
DATADIR="${data}" LOGDIR="${demo_dir}/results/$(date +%Y%m%d-%H%M%S)" NEXP="${NEXP:-2}" CONTAINER_RUNTIME=none
export DATADIR LOGDIR NEXP CONTAINER_RUNTIME
status=0
bash run_with_docker.sh || status=$?  # (its scorer prints the summary and says where it and the plot are)
exit "${status}"
