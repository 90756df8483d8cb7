"""`python -m training.preflight`: run once before the NEXP loop, inside the container.

For $BENCHMARK (a row of `training.benchmarks`): prints the doctor's report for it, runs the benchmark's own
check (its `preflight.check(environ)`: the sourced config, its arithmetic against the machine, the files the
trainer opens, the GPUs), then the data verifier the table names (`python -m <verifier> DATADIR
--preflight`: the fast check of the prepared data). Exits 1 with every problem named, so a typo or a
missing shard fails in seconds rather than after init. A config whose schedule has no evaluation before
the run stops is refused in one line, and nothing else is checked.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

from training import benchmarks, doctor
from training.common.preflight import NoEvaluation

REPO = Path(__file__).resolve().parents[1]


def verify_data(bench: benchmarks.Benchmark, datadir: str) -> list[str]:
    """The data verifier's problems (its output is shown as it is)."""
    cmd = [sys.executable, "-m", bench.data_verifier, datadir, "--preflight"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    print(proc.stdout, end="")
    if proc.returncode == 0:
        return []
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return lines or [f"{' '.join(cmd)} failed (exit {proc.returncode}) without a word"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        print(__doc__ if argv[0] in ("-h", "--help") else f"preflight: no arguments expected ({argv})")
        return 0 if argv[0] in ("-h", "--help") else 2
    try:
        bench = benchmarks.runnable(os.environ.get("BENCHMARK"))
    except ValueError as err:
        print(f"preflight: {err}", file=sys.stderr)
        return 1
    doctor.main(["--benchmark", bench.name, os.environ.get("DATADIR", "."), os.environ.get("LOGDIR", ".")])
    datadir = os.environ.get("DATADIR")
    try:
        problems = importlib.import_module(bench.preflight).check(os.environ)
    except NoEvaluation as err:  # the config alone rules the run out: no data is read
        problems, datadir = [str(err)], None
    except Exception as err:  # noqa: BLE001 - any failure here is a preflight failure, reported by name
        problems = [f"{type(err).__name__}: {err}"]
    if datadir and Path(datadir).is_dir():
        # A thing both the check and the verifier name (AMD's NeMo model folder) is said once.
        problems += [
            line for line in verify_data(bench, datadir) if not any(line.endswith(p) for p in problems)
        ]
    for problem in problems:
        print(f"preflight: {problem}", file=sys.stderr)
    print(f"preflight: {bench.name} {'FAILED' if problems else 'OK'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
