"""Writing a file whole or not at all, and a full disk said in one line: the one atomic write of the trainers
and of the data preparation (`input_preprocessing/` imports it from here; it needs nothing but the standard
library)."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path


class DiskFullError(OSError):
    """No space left writing a file; the message names it."""


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path` (its folder made if missing) to write, by any means (text,
    HDF5, numpy); on success it is renamed to `path`, so a reader never sees half a file. On any failure,
    an interrupt included, the temporary file is removed; a full disk raises `DiskFullError("disk full
    writing PATH")`. The name holds the process id, `<name>.<pid>.tmp`, so two writers never share one; a
    killed process leaves only such `*.tmp` files, which the data preparation clears on its next run."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise DiskFullError(errno.ENOSPC, f"disk full writing {path}") from err
        raise
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    """`text` (UTF-8) to `path`, whole or not at all (`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
