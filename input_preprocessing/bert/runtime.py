"""What every stage of the data preparation shares: atomic writes, a progress line with ETA, a process pool,
completion markers, and sizing the number of workers to the machine."""

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TextIO

GIB = 1 << 30


class PrepError(RuntimeError):
    """A problem the user can act on; the message names the file, flag or setting at fault."""


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it to `path`, on failure remove it.

    A killed process leaves only `*.tmp` files, which `remove_stale_tmp` clears on the next run, so a
    file with the final name is always complete.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


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


def _bytes(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


class ByteProgress(Progress):
    """A download's progress in bytes. The total may be an estimate that is refined as files start (shown
    with `~`), and bytes already there when it starts (a resumed download) do not count in the rate."""

    def __init__(self, stage: str, done: int = 0, stream: TextIO | None = None, log_every: float = 30.0):
        super().__init__(stage, 0, "bytes", stream, log_every)
        self.done = self._start_done = done
        self.exact = False

    def update(self, done: int, total: int, exact: bool) -> None:
        self.done, self.total, self.exact = done, max(total, done), exact
        if self._due():
            self._draw()

    def finish(self, complete: bool) -> None:
        """The last line; a complete download's total is what it wrote."""
        if complete:
            self.total = self.done
        self._draw(end=True)

    def _amounts(self, rate: float) -> str:
        total = _bytes(self.total) if self.exact or self.done >= self.total else f"~{_bytes(self.total)}"
        return f"{_bytes(self.done)} of {total}  {rate / 1e6:.1f} MB/s"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def memory_available() -> int:
    """Bytes of memory available to new work (MemAvailable), or 0 if unknown."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def default_jobs(memory_per_job: int) -> int:
    """Workers for a stage: one per usable CPU, fewer if memory would not hold them all."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    mem = memory_available()
    by_memory = mem // memory_per_job if mem else cpus
    return max(1, min(cpus, by_memory))


def parallel_map(
    fn: Callable[[Any], Any],
    tasks: Iterable[Any],
    jobs: int,
    progress: Progress | None = None,
    on_done: Callable[[Any], None] | None = None,
) -> list[Any]:
    """Run `fn` over `tasks`, in order of completion, with up to `jobs` processes (inline when jobs == 1).

    Results come back in task order. `on_done(result)` runs in this process after each task, in order of
    completion. A failing task stops the map and re-raises its error after the running ones end.
    """
    tasks = list(tasks)
    results: list[Any] = [None] * len(tasks)
    if jobs <= 1 or len(tasks) <= 1:
        for i, task in enumerate(tasks):
            results[i] = fn(task)
            if progress:
                progress.advance()
            if on_done:
                on_done(results[i])
        return results
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=get_context("spawn")) as pool:
        pending = {pool.submit(fn, task): i for i, task in enumerate(tasks)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i = pending.pop(fut)
                try:
                    results[i] = fut.result()
                except BaseException:
                    for other in pending:
                        other.cancel()
                    raise
                if progress:
                    progress.advance()
                if on_done:
                    on_done(results[i])
    return results


class Markers:
    """Stage completion markers under `<outputdir>/.prep/`: `<stage>.done` holds the stage's statistics."""

    def __init__(self, root: Path):
        self.folder = root / ".prep"

    def done(self, stage: str) -> dict | None:
        path = self.folder / f"{stage}.done"
        return json.loads(path.read_text()) if path.exists() else None

    def mark(self, stage: str, stats: dict) -> None:
        write_json_atomic(self.folder / f"{stage}.done", stats)


def check_free_disk(folder: Path, needed: int, what: str) -> None:
    """Fail before starting if `folder`'s file system has less than `needed` bytes free."""
    probe = folder
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise PrepError(
            f"not enough free disk under {folder}: {free / GIB:.1f} GiB free, about {needed / GIB:.1f} GiB "
            f"needed ({what}); free some space, choose another --outputdir, or pass --no-disk-check"
        )
