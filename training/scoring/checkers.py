"""Run mlperf_logging's checkers as functions: they report through the root logger, which we capture."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from mlperf_logging.rcp_checker import rcp_checker

from .runs import Run, read_run


class _ListHandler(logging.Handler):
    def __init__(self, lines: list[str]):
        super().__init__(logging.INFO)
        self.lines = lines
        self.setFormatter(logging.Formatter("%(levelname)s - %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextmanager
def captured_root_log() -> Iterator[list[str]]:
    """Collect what the checkers log (INFO and up) into a list; the caller's root handlers see none of it."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    lines: list[str] = []
    root.handlers = [_ListHandler(lines)]
    root.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        root.handlers, level = saved
        root.setLevel(level)


@dataclass
class RcpResult:
    passed: bool | None  # None: not run
    message: str
    normalization_factor: float
    log: list[str] = field(default_factory=list)


def _not_converged(like: Run) -> str:
    """A result file that the RCP checker reads as a run of `like`'s benchmark and batch size that did not
    converge."""
    records = [
        {"key": "submission_benchmark", "value": like.benchmark},
        {"key": "global_batch_size", "value": like.global_batch_size},
        {"key": "run_stop", "value": None, "metadata": {"status": "aborted"}},
    ]
    return "".join(f":::MLLOG {json.dumps(record)}\n" for record in records)


def rcp_check(
    logs: list[Path], ruleset: str, damaged: Collection[Path] = (), table: Path | None = None
) -> RcpResult:
    """mlperf_logging's RCP check (pruned RCPs) of one benchmark's runs, against `table` (an RCP table file,
    as the checker's --custom_rcps) or by default the package's table of the ruleset. The checker globs
    `result_*.txt`, so it reads a temporary folder of symlinks; `set_scaling=False` keeps it from writing
    scaling.json. A `damaged` log, which the checker's own reading would raise on, is staged as a run that
    did not converge (how the scorer counts it), so that the checker drops the same runs as the olympic
    mean."""
    first = next(read_run(log) for log in logs if log not in damaged)
    with (
        tempfile.TemporaryDirectory(prefix="rcp_") as staged,
        captured_root_log() as lines,
        open(table) if table else nullcontext() as rcp_file,
    ):
        for i, log in enumerate(logs):
            if log in damaged:
                (Path(staged) / f"result_{i}.txt").write_text(_not_converged(first))
            else:
                os.symlink(Path(log).resolve(), Path(staged) / f"result_{i}.txt")
        passed, message, factor = rcp_checker.check_directory(
            staged,
            "training",
            ruleset,
            verbose=False,
            bert_train_samples=False,
            rcp_file=rcp_file,
            rcp_pass="pruned_rcps",
            set_scaling=False,
        )
    return RcpResult(bool(passed), message, float(factor), lines)
