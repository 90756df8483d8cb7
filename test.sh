#!/usr/bin/env bash
# The test command: sets up ./.venv on first use, then lints and runs every test tier that needs no GPU.
#   ./test.sh              every tier but the demo tier (18 to 24 minutes on 2 cores from a clean clone)
#   ./test.sh -m "not slow"   the fast tiers only; other arguments go to pytest
#   ./test.sh -m demo      the demo tier alone: what only repeats a path the other tiers run (the CPU demos'
#                          and podman's second runs, NEXP=2, and the walk-through's 8B demo run); pyproject.toml's
#                          `-m 'not demo'` leaves it out unless -m names it
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
# shellcheck source=scripts/venv.sh
source scripts/venv.sh

echo "== ruff"
ruff check .
ruff format --check .
echo "== pytest"
# two workers, a test file each at a time (a file's tests share its fixtures), in the order tests/conftest.py
# gives (the files with slow tests first); `-n 0` runs in this process
python -m pytest -n 2 --dist loadfile --no-loadscope-reorder "$@"
