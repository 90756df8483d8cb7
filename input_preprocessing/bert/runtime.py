"""BERT's data preparation machinery: a download's progress in bytes, a process pool, completion markers,
and sizing the number of workers to the machine. What all benchmarks share is `input_preprocessing.common`."""

import contextlib
import json
import os
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TextIO

from input_preprocessing.common.runtime import Progress, write_json_atomic


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
