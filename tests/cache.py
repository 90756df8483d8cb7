"""The tests' cache of prepared data (BERT's, LoRA's, the FP4 runs'): a folder under CACHE named by what made
it (the preparation code's hash), built once and then reused by every test session and every pytest worker.

`cached(name, build)` builds into a folder of this process's own and renames it into place whole, under a lock
file: two workers asking at once build it once, the second waits and reuses it, and neither sees a half-made
folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("MLPERF_TEST_CACHE", Path.home() / ".cache" / "mlperf-repro-tests"))


def tree_hash(*roots: Path) -> str:
    """A short hash of every file under `roots` (names and bytes), __pycache__ left out."""
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cached(name: str, build: Callable[[Path], None]) -> Path:
    """CACHE/name, made by `build(folder)` (it writes into the empty folder it is given) where missing."""
    out = CACHE / name
    if out.is_dir():  # renamed into place whole, below
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if out.is_dir():  # another process made it while this one waited
            return out
        tmp = out.with_name(f"{name}.partial-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            build(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        tmp.rename(out)
    return out
