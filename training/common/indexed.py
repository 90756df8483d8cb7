"""MLPerf's indexed datasets (Megatron's `.bin/.idx` pairs: the C4 data of Llama 3.1 8B), opened with
megatron-core's own reader: what the 8B trainer reads its data with and what its data verifier checks the
files by (`input_preprocessing/llama31_8b/verify.py`), so that both see a file the same way."""

from __future__ import annotations

import contextlib
import logging
import warnings
from pathlib import Path

from training.common import outcome


class DataError(outcome.DataError):
    """A missing, short or unreadable data file; the message names it."""


@contextlib.contextmanager
def quiet_megatron():
    """megatron-core warns at import that TE and apex are missing (we do not use its kernels) and logs
    every index it builds at INFO."""
    level = logging.getLogger("megatron").level
    logging.getLogger("megatron").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(Transformer Engine|Apex|apex).*")
        try:
            yield
        finally:
            logging.getLogger("megatron").setLevel(level)


def check_prefix(prefix: Path) -> None:
    missing = [f"{prefix}{ext}" for ext in (".bin", ".idx") if not Path(f"{prefix}{ext}").is_file()]
    if missing:
        raise DataError(f"missing data file(s): {', '.join(missing)}")


def open_indexed(prefix: Path):
    """megatron-core's IndexedDataset (mmap'ed .bin, the .idx read once)."""
    check_prefix(prefix)
    with quiet_megatron():
        from megatron.core.datasets.indexed_dataset import IndexedDataset

        try:
            return IndexedDataset(str(prefix), multimodal=False, mmap=True)
        except (AssertionError, ValueError, OSError) as err:
            raise DataError(f"{prefix}.idx/.bin: not a readable Megatron indexed dataset ({err})") from None
