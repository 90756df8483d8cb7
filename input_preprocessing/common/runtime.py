"""What every benchmark's data preparation shares: errors the user can act on, one-line messages, a stage's
progress with ETA, JSON written atomically (the one atomic write is `training.common.files`), clearing what a
killed run left, and a free-space check before a long stage."""

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from training.common.files import write_text_atomic

GIB = 1 << 30


class PrepError(RuntimeError):
    """A problem the user can act on; the message names the file, flag or setting at fault."""


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def remove_stale_tmp(folder: Path) -> int:
    """Remove `*.tmp` files left in `folder` (recursively) by a killed run; returns how many."""
    if not folder.exists():
        return 0
    stale = [p for p in folder.rglob("*.tmp") if p.is_file()]
    for p in stale:
        p.unlink()
    return len(stale)


def _fmt_seconds(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"


class Progress:
    """One stage's progress on stderr: a redrawn bar on a terminal; otherwise (a log file) a plain line at
    each 10% step once the stage has run 5 s, at least every `log_every` seconds (30), and at the end. Shows
    done/total, rate and ETA."""

    def __init__(
        self,
        stage: str,
        total: int,
        unit: str = "items",
        stream: TextIO | None = None,
        log_every: float = 30.0,
    ):
        self.stage, self.total, self.unit = stage, max(0, total), unit
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.log_every = log_every
        self.done = self._start_done = 0
        self.start = self._last_draw = time.monotonic()
        self._last_decile = 0
        if self.tty:
            self._draw()

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.done >= self.total:
            self._draw(end=True)
        elif self._due():
            self._draw()

    def _due(self) -> bool:
        now = time.monotonic()
        decile = int(10 * self.done / self.total) if self.total else 10
        new_decile, self._last_decile = decile > self._last_decile, decile
        if self.tty:
            return now - self._last_draw >= 0.2
        return now - self._last_draw >= self.log_every or (new_decile and now - self.start >= 5)

    def _draw(self, end: bool = False) -> None:
        now = self._last_draw = time.monotonic()
        frac = min(1.0, self.done / self.total) if self.total else 1.0
        elapsed = now - self.start
        rate = (self.done - self._start_done) / elapsed if elapsed > 0 else 0.0
        eta = _fmt_seconds((self.total - self.done) / rate) if rate > 0 and not end else "?"
        line = (
            f"[{self.stage}] {frac:6.1%} |{'#' * int(frac * 24):<24}| {self._amounts(rate)}"
            f"  elapsed {_fmt_seconds(elapsed)}  ETA {'0:00:00' if end else eta}"
        )
        if self.tty:
            self.stream.write("\r" + line + ("\n" if end else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def _amounts(self, rate: float) -> str:
        return f"{self.done}/{self.total} {self.unit}  {rate:.1f}/s"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def check_free_disk(folder: Path, needed: int, what: str) -> None:
    """Fail before starting if `folder`'s file system has less than `needed` bytes free; the message names
    the folder, the free and the needed bytes."""
    probe = folder
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise PrepError(
            f"not enough free disk under {folder}: {free:,} bytes free ({free / GIB:.1f} GiB), about "
            f"{needed:,} bytes needed ({needed / GIB:.1f} GiB) for {what}; free some space, choose another "
            "--outputdir, or pass --no-disk-check"
        )
