"""Read one MLPerf log (its `:::MLLOG` lines) into what the scorer needs, and find the logs of a folder."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

TOKEN = ":::MLLOG "
INCOMPLETE = "incomplete/crashed"  # status of a log without run_stop


@dataclass
class Run:
    path: Path
    benchmark: str | None = None
    status: str = INCOMPLETE  # run_stop's metadata.status
    run_start_ms: int | None = None
    run_stop_ms: int | None = None
    global_batch_size: int | None = None
    target_accuracy: float | None = None  # our trainers (and NVIDIA's) log it; MLCommons' result files do not
    max_sequence_length: int | None = None
    throughput: float | None = None  # value.throughput of the last tracked_stats line
    # (eval_accuracy metadata, value) of every eval before run_stop, in log order
    evals: list[tuple[dict, float]] = field(default_factory=list)
    bad_lines: int = 0  # :::MLLOG lines that are not valid JSON (e.g. cut off by a crash)

    @property
    def converged(self) -> bool:
        return self.status == "success"

    @property
    def minutes(self) -> float | None:
        if self.run_start_ms is None or self.run_stop_ms is None:
            return None
        return (self.run_stop_ms - self.run_start_ms) / 60000

    @property
    def last_accuracy(self) -> float | None:
        return self.evals[-1][1] if self.evals else None

    def samples(self, samples_key: str) -> float | None:
        """Samples to converge: `samples_key` of the last eval_accuracy before run_stop."""
        return self.evals[-1][0].get(samples_key) if self.evals else None


def read_run(path: Path) -> Run:
    run = Run(Path(path))
    with open(path, encoding="latin-1") as f:  # latin-1 like mlperf_logging's own parsers
        lines = [line[line.index(TOKEN) + len(TOKEN) :] for line in f if TOKEN in line]
    for line in lines:
        try:
            record = json.loads(line)
            key, value, metadata = record["key"], record.get("value"), record.get("metadata") or {}
        except (ValueError, KeyError, TypeError):
            run.bad_lines += 1
            continue
        if key == "submission_benchmark":
            run.benchmark = value
        elif key == "global_batch_size":
            run.global_batch_size = value
        elif key == "target_accuracy":
            run.target_accuracy = float(value)
        elif key == "max_sequence_length":
            run.max_sequence_length = int(value)
        elif key == "tracked_stats" and isinstance(value, dict) and "throughput" in value:
            run.throughput = float(value["throughput"])
        elif key == "run_start" and run.run_start_ms is None:
            run.run_start_ms = record["time_ms"]
        elif key == "eval_accuracy" and run.run_stop_ms is None:
            run.evals.append((metadata, float(value)))
        elif key == "run_stop" and run.run_stop_ms is None:
            run.run_stop_ms = record["time_ms"]
            run.status = str(metadata.get("status", "run_stop without status"))
    return run


def _natural_key(path: Path) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def find_logs(logdir: Path) -> list[Path]:
    """Every `*.txt` / `*.log` file in `logdir` with `:::MLLOG` lines (result_9 before result_10), leaving out
    our compliance reports and the checkers' own logs."""
    found = []
    for path in Path(logdir).iterdir():
        if not path.is_file() or path.suffix not in (".txt", ".log"):
            continue
        if path.name.endswith(".compliance.txt") or path.name in (
            "compliance_checker.log",
            "rcp_checker.log",
        ):
            continue
        with open(path, encoding="latin-1") as f:
            if any(TOKEN in line for line in f):
                found.append(path)
    return sorted(found, key=_natural_key)
