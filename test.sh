#!/usr/bin/env bash
# The test command: sets up ./.venv on first use, then lints and runs every test tier that needs no GPU.
#   ./test.sh              everything (about 30 minutes on 2 cores)
#   ./test.sh -m "not slow"   the fast tiers only; other arguments go to pytest
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
# shellcheck source=scripts/venv.sh
source scripts/venv.sh

echo "== ruff"
ruff check .
ruff format --check .
echo "== pytest"
python -m pytest "$@"
