"""Writing a file whole or not at all, and a full disk said in one line."""

from __future__ import annotations

import errno
from pathlib import Path


class DiskFullError(OSError):
    """No space left writing a file; the message names it."""


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path` and rename it into place, so a reader never sees half a
    file. On failure the temporary file is removed; a full disk raises `DiskFullError("disk full writing
    PATH")`."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if err.errno == errno.ENOSPC:
            raise DiskFullError(errno.ENOSPC, f"disk full writing {path}") from err
        raise
