"""`python -m training.preflight`: run once before the NEXP loop, inside the container.

For $BENCHMARK (a row of `training.benchmarks`): prints the doctor's report for it, runs the benchmark's own
check (its `preflight.check(environ)`: the sourced config, its arithmetic against the machine, the files the
trainer opens, the GPUs), then the data verifier the table names (`python -m <verifier> DATADIR
--preflight`: the fast check of the prepared data). Exits 1 with every problem named, so a typo or a
missing shard fails in seconds rather than after init. A config whose schedule has no evaluation before
the run stops is refused in one line, and nothing else is checked. The problems about the data (those naming
DATADIR or MODEL; a DATADIR missing or empty is one line) come last, at most a few, and the output ends with
the command that prepares the folder for this benchmark (`training.prepare_hint`).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

from training import benchmarks, doctor, prepare_hint
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


# data problems shown before the rest are cut short: the first names the problem, the command ends the list
MAX_DATA_LINES = 5


def data_problems(problems: list[str], folders: list[str]) -> tuple[list[str], list[str]]:
    """(the problems about the data folders `folders` (DATADIR, MODEL), the others), each in its order."""
    about = [p for p in problems if any(folder and folder in p for folder in folders)]
    return about, [p for p in problems if p not in about]


def prepare_lines(bench: benchmarks.Benchmark, environ, about_model: bool) -> list[str]:
    """The command that prepares DATADIR (and MODEL, when a problem is about it alone) for `bench`."""
    sample = prepare_hint.is_sample(environ)
    command = prepare_hint.prepare_command(bench.name, environ.get("DATADIR", "DIR"), sample)
    lines = [f"to prepare DATADIR for {bench.name}: {command}"]
    if about_model:
        command = prepare_hint.model_command(bench.name, environ["MODEL"], sample)
        if command not in lines[0]:
            lines.append(f"to prepare MODEL for {bench.name}: {command}")
    return lines


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
    datadir = os.environ.get("DATADIR", "")
    model = os.environ.get("MODEL", "")
    try:
        problems = importlib.import_module(bench.preflight).check(os.environ)
    except NoEvaluation as err:  # the config alone rules the run out: no data is read
        problems, datadir = [str(err)], ""
    except Exception as err:  # noqa: BLE001 - any failure here is a preflight failure, reported by name
        problems = [f"{type(err).__name__}: {err}"]
    data, others = data_problems(problems, [datadir, model])
    if datadir and not Path(datadir).is_dir():
        data = [f"DATADIR {datadir}: no such folder"]  # what the check says of the files in it follows
    elif datadir and not any(Path(datadir).iterdir()):
        data = [f"DATADIR {datadir} is empty: no data was prepared there"]
    elif datadir:
        # A thing both the check and the verifier name (AMD's NeMo model folder) is said once.
        data += [line for line in verify_data(bench, datadir) if not any(line.endswith(p) for p in data)]
    for problem in others + data[:MAX_DATA_LINES]:
        print(f"preflight: {problem}", file=sys.stderr)
    if len(data) > MAX_DATA_LINES:
        more = len(data) - MAX_DATA_LINES
        print(f"preflight: ... and {more} more about the data: python -m {bench.data_verifier} {datadir}")
    print(f"preflight: {bench.name} {'FAILED' if others or data else 'OK'}")
    if data and not any("prepare_data.sh" in p for p in data):  # (one that names its command already)
        about_model = bool(model) and any(model in p and datadir not in p for p in data)
        for line in prepare_lines(bench, os.environ, about_model):
            print(f"preflight: {line}", file=sys.stderr)
    return 1 if others or data else 0


if __name__ == "__main__":
    sys.exit(main())
