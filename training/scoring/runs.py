"""Read one MLPerf log (its `:::MLLOG` lines) into what the scorer needs, and find the logs of a folder."""

from __future__ import annotations

import fcntl
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .rules import BENCHMARKS

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
    evaluation_frequency: int | None = None  # flux1's samples between evaluations
    throughput: float | None = None  # value.throughput of the last tracked_stats line
    submission: dict[str, str] = field(default_factory=dict)  # submission_org, _division, _status, _platform
    # (eval_accuracy metadata, value) of every eval before run_stop, in log order
    evals: list[tuple[dict, float]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what makes the log damaged, each naming its line
    keys: set[str] = field(default_factory=set)  # every key the log has
    ruleset: str | None = None  # the round our trainer ran it under (its effective config beside the log)

    @property
    def damaged(self) -> bool:
        return bool(self.problems)

    @property
    def converged(self) -> bool:
        """What the log says; the scorer also requires it undamaged and compliant, as MLCommons does."""
        return self.status == "success" and not self.damaged

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
    """The run a log tells of. A damaged log (empty, a line that is not JSON, a value of the wrong kind, an
    event without its time) never raises: each problem is kept in `run.problems`, naming its line."""
    run = Run(Path(path))
    lines = mllog_lines(path)
    if not lines:
        run.problems.append("empty file" if Path(path).stat().st_size == 0 else "no :::MLLOG lines")
    for n, line in lines:
        try:
            record = json.loads(line)
        except ValueError as err:
            run.problems.append(f"line {n}: not valid JSON ({err.msg})")
            continue
        try:
            _read_record(run, record)
        except ValueError as err:
            run.problems.append(f"line {n}: {err}")
    run.ruleset = recorded_ruleset(Path(path))
    return run


def mllog_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, the JSON after `:::MLLOG `) of each MLLOG line of a log, in order."""
    with open(path, encoding="latin-1") as f:  # latin-1 like mlperf_logging's own parsers
        return [
            (n, line[line.index(TOKEN) + len(TOKEN) :].strip())
            for n, line in enumerate(f, 1)
            if TOKEN in line
        ]


def records(path: Path) -> list[dict]:
    """Every MLLOG record of a log that reads as one (a JSON object with a key), in order; `read_run` says
    what is wrong with the others."""
    found = []
    for _, line in mllog_lines(path):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("key"), str):
            found.append(record)
    return found


def recorded_ruleset(log: Path) -> str | None:
    """The `ruleset` of the effective config our launchers write beside a log (`<stem>.config.json`)."""
    try:
        ruleset = json.loads(log.with_name(f"{log.stem}.config.json").read_text()).get("ruleset")
    except (OSError, ValueError, AttributeError):
        return None
    return ruleset if isinstance(ruleset, str) and ruleset else None


def _read_record(run: Run, record) -> None:
    """Take one :::MLLOG record into `run`; a ValueError names what is wrong with it."""
    if not isinstance(record, dict) or not isinstance(record.get("key"), str):
        raise ValueError("not an MLLOG record (no key)")
    key, value, metadata = record["key"], record.get("value"), record.get("metadata") or {}
    run.keys.add(key)
    if not isinstance(metadata, dict):
        raise ValueError(f"{key}: metadata {metadata!r} is not an object")

    def number(v, what: str = "value") -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{key}: {what} {v!r} is not a number")
        return v

    if key == "submission_benchmark":
        run.benchmark = value
    elif key.startswith("submission_"):
        run.submission[key.removeprefix("submission_")] = str(value)
    elif key == "global_batch_size":
        run.global_batch_size = number(value)
    elif key == "target_accuracy":
        run.target_accuracy = float(number(value))
    elif key == "max_sequence_length":
        run.max_sequence_length = int(number(value))
    elif key == "evaluation_frequency":
        run.evaluation_frequency = int(number(value))
    elif key == "tracked_stats" and isinstance(value, dict) and "throughput" in value:
        run.throughput = float(number(value["throughput"], "throughput"))
    elif key == "eval_accuracy" and run.run_stop_ms is None:
        run.evals.append((metadata, float(number(value))))
    elif key in ("run_start", "run_stop"):
        if "time_ms" not in record:
            raise ValueError(f"{key}: no time_ms")
        time_ms = number(record["time_ms"], "time_ms")
        if key == "run_start" and run.run_start_ms is None:
            run.run_start_ms = time_ms
        elif key == "run_stop" and run.run_stop_ms is None:
            run.run_stop_ms = time_ms
            run.status = str(metadata.get("status", "run_stop without status"))


def _natural_key(path: Path) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


# The names a run's log has: MLCommons' result_<i>.txt and our launchers' <benchmark>_<system>_<i>.log. A file
# so named is a run even with no :::MLLOG line (a trainer that died at start, a log cut off at zero bytes).
RUN_LOG_NAME = re.compile(rf"result_\d+\.txt|({'|'.join(map(re.escape, BENCHMARKS))})_.+_\d+\.log")


def find_logs(logdir: Path) -> list[Path]:
    """Every run log in `logdir`, in natural order (result_9 before result_10): each file named as one, and
    any other `*.txt` / `*.log` file with `:::MLLOG` lines, leaving out our compliance reports and the
    checkers' own logs."""
    found = []
    for path in Path(logdir).iterdir():
        if not path.is_file() or path.suffix not in (".txt", ".log"):
            continue
        if path.name.endswith(".compliance.txt") or path.name in (
            "compliance_checker.log",
            "rcp_checker.log",
        ):
            continue
        if RUN_LOG_NAME.fullmatch(path.name):
            found.append(path)
            continue
        with open(path, encoding="latin-1") as f:
            if any(TOKEN in line for line in f):
                found.append(path)
    return sorted(found, key=_natural_key)


def in_progress(path: Path) -> bool:
    """Whether a run is still writing the log `path`: the launchers hold a lock on each log (flock) for as
    long as its run lasts, and the kernel drops it when the run's processes end, however they end."""
    try:
        with open(path, "rb") as f:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a file system without locks: nothing tells a run in progress
        return False
    return False
