""":::MLLOG lines through mlperf-logging, written by rank 0 only.

Every line's `metadata.file/lineno` names the code that asked for it, as mlperf-logging's `stack_offset`
counts frames: the caller of `event`/`start`/`end`, and the caller of `hyperparameters`/`submission` (not
the loop inside them). A helper that logs for its own caller passes `depth=1` (its frame is skipped too).
The seed checker keys on the seed line's file and line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mlperf_logging import mllog
from mlperf_logging.mllog import constants

ROOT = Path(__file__).resolve().parents[2]


class MLLogger:
    # frames between mlperf-logging's caller lookup and the code that called one of the methods below:
    # mllog's event/start/end, `_emit`, and the method itself
    _STACK_OFFSET = 3

    def __init__(self, rank: int = 0):
        self.enabled = rank == 0
        self.logged: set[str] = set()  # the keys logged so far (on every rank): what the run's end still owes
        mllog.config(root_dir=str(ROOT))
        self._log = mllog.get_mllogger()

    def event(self, key: str, value=None, metadata: dict | None = None, depth: int = 0) -> None:
        self._emit(self._log.event, key, value, metadata, depth)

    def start(self, key: str, value=None, metadata: dict | None = None, depth: int = 0) -> None:
        self._emit(self._log.start, key, value, metadata, depth)

    def end(self, key: str, value=None, metadata: dict | None = None, depth: int = 0) -> None:
        self._emit(self._log.end, key, value, metadata, depth)

    def _emit(self, method, key: str, value, metadata: dict | None, depth: int) -> None:
        self.logged.add(key)
        if self.enabled:
            method(key=key, value=value, metadata=metadata, stack_offset=self._STACK_OFFSET + depth)
            sys.stdout.flush()

    def submission(self, benchmark: str, org: str, platform: str, num_nodes: int, depth: int = 0) -> None:
        """The submission block every MLPerf log opens with."""
        for key, value in (
            (constants.SUBMISSION_BENCHMARK, benchmark),
            (constants.SUBMISSION_ORG, org),
            (constants.SUBMISSION_DIVISION, constants.CLOSED),
            (constants.SUBMISSION_STATUS, constants.ONPREM),
            (constants.SUBMISSION_PLATFORM, f"{num_nodes}x{platform}"),
        ):
            self.event(key, value, depth=depth + 1)

    def hyperparameters(self, values: dict, depth: int = 0) -> None:
        for key, value in values.items():
            self.event(key, value, depth=depth + 1)


__all__ = ["MLLogger", "constants"]
