""":::MLLOG lines through mlperf-logging, written by rank 0 only.

`metadata.file/lineno` point at the trainer's call site (one frame above this wrapper), which is what
the seed checker keys on.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mlperf_logging import mllog
from mlperf_logging.mllog import constants

ROOT = Path(__file__).resolve().parents[2]


class MLLogger:
    def __init__(self, rank: int = 0):
        self.enabled = rank == 0
        self.logged: set[str] = set()  # the keys logged so far (on every rank): what the run's end still owes
        mllog.config(default_stack_offset=2, root_dir=str(ROOT))
        self._log = mllog.get_mllogger()

    def event(self, key: str, value=None, metadata: dict | None = None) -> None:
        self.logged.add(key)
        if self.enabled:
            self._log.event(key=key, value=value, metadata=metadata)
            sys.stdout.flush()

    def start(self, key: str, value=None, metadata: dict | None = None) -> None:
        self.logged.add(key)
        if self.enabled:
            self._log.start(key=key, value=value, metadata=metadata)
            sys.stdout.flush()

    def end(self, key: str, value=None, metadata: dict | None = None) -> None:
        self.logged.add(key)
        if self.enabled:
            self._log.end(key=key, value=value, metadata=metadata)
            sys.stdout.flush()

    def submission(self, benchmark: str, org: str, platform: str, num_nodes: int) -> None:
        """The submission block every MLPerf log opens with."""
        self.event(constants.SUBMISSION_BENCHMARK, benchmark)
        self.event(constants.SUBMISSION_ORG, org)
        self.event(constants.SUBMISSION_DIVISION, constants.CLOSED)
        self.event(constants.SUBMISSION_STATUS, constants.ONPREM)
        self.event(constants.SUBMISSION_PLATFORM, f"{num_nodes}x{platform}")

    def hyperparameters(self, values: dict) -> None:
        for key, value in values.items():
            self.event(key, value)


__all__ = ["MLLogger", "constants"]
