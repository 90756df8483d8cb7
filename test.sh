#!/usr/bin/env bash
# The test command: sets up ./.venv on first use, then lints and runs every test tier that needs no GPU.
#   ./test.sh              everything (about 15-20 minutes on 2 cores)
#   ./test.sh -m "not slow"   the fast tiers only; other arguments go to pytest
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
# shellcheck source=scripts/venv.sh
source scripts/venv.sh

echo "== ruff"
ruff check .
ruff format --check .
echo "== pytest"
# two workers: most tests hold one core (one thread each); podman's and SLURM's share one worker (conftest.py)
python -m pytest -n 2 --dist loadgroup "$@"
