"""The packed-row `.npy` files AMD's and NVIDIA's Llama 2 70B LoRA code reads, byte for byte as theirs.

A file is what `np.save` writes for a 1-D object array of dicts, one per row of `seq_len` tokens, keys in this
order (the order of their `convert_dataset.py` / `download_dataset.py`):

    input_ids     numpy int32 array (seq_len,)  the row's tokens
    loss_mask     list of Python int 0/1        1 where the token is a target (their `labels != -100`)
    seq_start_id  list of Python int            where each packed sequence starts ([0]: one sequence per row)

Read it with `np.load(path, allow_pickle=True)`. Their files were written by numpy 1.x, whose `np.save`
pickles with protocol 3 and names the array constructor `numpy.core.multiarray._reconstruct`; numpy 2 writes
protocol 4 and `numpy._core.multiarray`. `save_rows` writes numpy 1.x's bytes under either numpy (numpy 2
reads them without a warning), so a file made here from the same parquet has their size and checksum: at the
MLCommons shapes (3,901 and 173 rows of 8,192 tokens) the sizes are NVIDIA's 192,151,239 and 8,521,136 bytes.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from input_preprocessing.common.runtime import write_json_atomic
from training.common.files import atomic_path

KEYS = ("input_ids", "loss_mask", "seq_start_id")
META = "meta.json"  # beside the .npy files: what they hold (see `write_meta`)
FORMAT = "mlperf-repro/llama2-70b-lora-data/1"
TOKEN_DTYPE = np.dtype(np.int32)
# The only global whose name differs between numpy 1.x and 2.x pickles; it opens the stream (the outer array).
_NUMPY2_RECONSTRUCT = b"cnumpy._core.multiarray\n_reconstruct\n"
_NUMPY1_RECONSTRUCT = b"cnumpy.core.multiarray\n_reconstruct\n"
_PROTO3 = b"\x80\x03"


def make_row(
    input_ids: np.ndarray, loss_mask: np.ndarray | Sequence[int], seq_start_id: Sequence[int]
) -> dict:
    """One row as AMD's and NVIDIA's converters build it. `input_ids` must already be int32 (a slice of one
    int32 array keeps a single dtype object, as pandas' arrays do, and so the same pickle bytes)."""
    if input_ids.dtype != TOKEN_DTYPE:
        raise TypeError(f"input_ids must be {TOKEN_DTYPE}, not {input_ids.dtype}")
    mask = np.asarray(loss_mask).astype(np.uint8).tolist()  # Python ints 0/1, never bools
    return {"input_ids": input_ids, "loss_mask": mask, "seq_start_id": [int(s) for s in seq_start_id]}


def numpy1_pickle(array: np.ndarray) -> bytes:
    """The pickle numpy 1.x's `np.save` writes for `array` (protocol 3, `numpy.core.multiarray`)."""
    data = pickle.dumps(array, protocol=3)
    if data.startswith(_PROTO3 + _NUMPY2_RECONSTRUCT):
        # Protocol 3 has no frames and its memo refers by index, so renaming the opening global is safe.
        return _PROTO3 + _NUMPY1_RECONSTRUCT + data[len(_PROTO3) + len(_NUMPY2_RECONSTRUCT) :]
    if not data.startswith(_PROTO3 + _NUMPY1_RECONSTRUCT):
        raise RuntimeError(f"unexpected pickle of a numpy array under numpy {np.__version__}: {data[:48]!r}")
    return data


def save_rows(path: Path, rows: Sequence[dict]) -> int:
    """Write `rows` (from `make_row`) as `path` atomically, exactly as numpy 1.x's `np.save(path, rows)`.
    Returns the file's size."""
    array = np.empty(len(rows), dtype=object)
    array[:] = list(rows)
    body = numpy1_pickle(array)
    with atomic_path(Path(path)) as tmp, open(tmp, "wb") as f:
        np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
        f.write(body)
        size = f.tell()
    return size


def read_header(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, offset of the data) from a `.npy` header alone; raises ValueError if it is not one."""
    with open(path, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, _fortran, dtype = read(f)
        return shape, dtype, f.tell()


def load_rows(path: Path) -> np.ndarray:
    """The rows, as the trainers read them (unpickling: only for files this toolkit or MLCommons made)."""
    return np.load(path, allow_pickle=True)


def directory_md5(file_md5s: Iterable[str]) -> str:
    """AMD's `hash_directory`: the md5 of the files' md5 hex digests, sorted and concatenated."""
    combined = hashlib.md5(usedforsecurity=False)
    for digest in sorted(file_md5s):
        combined.update(digest.encode())
    return combined.hexdigest()


def write_meta(data_dir: Path, meta: dict) -> None:
    """`data_dir/meta.json`: format, kind ("mlperf" or "sample"), source, tokenizer, vocab_size, seq_length
    and per split its file, rows, sequences, size and md5 (what `verify` checks the files against)."""
    write_json_atomic(data_dir / META, {"format": FORMAT, **meta})


def read_meta(data_dir: Path) -> dict | None:
    """The folder's meta.json, None if it has none; raises ValueError if it is not one of ours."""
    path = data_dir / META
    if not path.is_file():
        return None
    meta = json.loads(path.read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    return meta
