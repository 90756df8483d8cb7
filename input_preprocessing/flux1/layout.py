"""The published layout of Flux.1's preprocessed data, for writing (the CPU sample) and checking (the
verifier). What the reference's `preprocess_flux_dataset.py` and `save_empty_encodings.py` write:

- a split is a Hugging Face `datasets` folder as `Dataset.save_to_disk` leaves it: `data-<i>-of-<n>.arrow`
  (Arrow's stream format, the features in the schema's `huggingface` metadata), `dataset_info.json` and
  `state.json`; a row per image with the columns `__key__` (string), `t5_encodings`, `clip_encodings`, `mean`,
  `logvar` (binary: `np.save` of the bfloat16 tensor's bits as uint16) and `timestep` (int32: the COCO
  sample's evaluation time index 0..7; null for CC12M);
- `empty_encodings/t5_empty.npy` and `clip_empty.npy`: the empty caption's T5 and pooled CLIP encodings,
  float16, with a leading batch dimension of 1.

Written with pyarrow directly (not `datasets`, which the toolkit does not otherwise need; torch only where
tensors are written, so the verifier reads without it), in the layout `save_to_disk` writes, schema
metadata included (`datasets` is not installed where the tests run, so its `load_from_disk` is not tried on
them there).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

TRAIN, VALID, EMPTY = "cc12m_preprocessed", "coco_preprocessed", "empty_encodings"
TENSORS = ("t5_encodings", "clip_encodings", "mean", "logvar")
COLUMNS = ("__key__", *TENSORS, "timestep")
EMPTY_FILES = ("t5_empty.npy", "clip_empty.npy")
# The published sets' sizes (the reference's README and mlperf_logging.py)
PUBLISHED_ROWS = {TRAIN: 1_099_776, VALID: 29_696}
EVAL_TIMESTEPS = 8


def schema():
    import pyarrow as pa

    features = {name: {"dtype": "binary", "_type": "Value"} for name in TENSORS}
    features = {
        "__key__": {"dtype": "string", "_type": "Value"},
        **features,
        "timestep": {"dtype": "int32", "_type": "Value"},
    }
    fields = [
        pa.field("__key__", pa.string()),
        *(pa.field(n, pa.binary()) for n in TENSORS),
        pa.field("timestep", pa.int32()),
    ]
    return pa.schema(fields, metadata={"huggingface": json.dumps({"info": {"features": features}})}), features


def npy_bytes(tensor) -> bytes:
    """A tensor as the published files store it: its bfloat16 bits as uint16, `np.save`d."""
    import torch

    buffer = io.BytesIO()
    np.save(buffer, tensor.to(torch.bfloat16).contiguous().view(torch.uint16).numpy())
    return buffer.getvalue()


def npy_shape(blob: bytes) -> tuple[int, ...]:
    """A stored tensor's shape (its bfloat16 bits as uint16, else a ValueError naming what it holds)."""
    array = np.load(io.BytesIO(blob))
    if array.dtype != np.uint16:
        raise ValueError(f"expected bfloat16 bits stored as uint16, found {array.dtype}")
    return array.shape


def write_split(folder: Path, rows: list[dict], rows_per_file: int = 10_000) -> None:
    """`rows` (dicts of the columns: tensors for the encodings, None for a missing timestep) as a
    `save_to_disk` folder."""
    import pyarrow as pa

    folder.mkdir(parents=True, exist_ok=True)
    arrow_schema, features = schema()
    chunks = [rows[i : i + rows_per_file] for i in range(0, len(rows), rows_per_file)] or [[]]
    names = [f"data-{i:05d}-of-{len(chunks):05d}.arrow" for i in range(len(chunks))]
    for name, chunk in zip(names, chunks):
        columns = {"__key__": [r["__key__"] for r in chunk], "timestep": [r.get("timestep") for r in chunk]}
        columns.update({n: [npy_bytes(r[n]) for r in chunk] for n in TENSORS})
        table = pa.table({n: columns[n] for n in COLUMNS}, schema=arrow_schema)
        with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, arrow_schema) as writer:
            writer.write_table(table)
    info = {"citation": "", "description": "", "features": features, "homepage": "", "license": ""}
    (folder / "dataset_info.json").write_text(json.dumps(info, indent=2) + "\n")
    state = {
        "_data_files": [{"filename": n} for n in names],
        "_fingerprint": folder.name,
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }
    (folder / "state.json").write_text(json.dumps(state, indent=2) + "\n")


def read_split(folder: Path):
    """A split's rows as one pyarrow table (memory-mapped), the files in `state.json`'s order."""
    import pyarrow as pa

    state = folder / "state.json"
    if state.is_file():
        files = [folder / f["filename"] for f in json.loads(state.read_text())["_data_files"]]
    else:
        files = sorted(folder.glob("*.arrow"))
    if not files:
        raise FileNotFoundError(f"{folder}: no .arrow files")
    tables = [pa.ipc.open_stream(pa.memory_map(str(f))).read_all() for f in files]
    return pa.concat_tables(tables)


def write_empty(folder: Path, t5, clip) -> None:
    """The empty caption's T5 [T, D] and pooled CLIP [P] encodings, as float16 with a batch dimension."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    for name, tensor in zip(EMPTY_FILES, (t5, clip)):
        np.save(folder / name, tensor[None].to(torch.float16).numpy())
