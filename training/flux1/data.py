"""Flux.1's data as MLCommons publishes it: the CC12M subset and the COCO-2014 validation subset run through
the frozen encoders, each a Hugging Face `datasets` folder (`save_to_disk`: `data-*.arrow` files in Arrow's
stream format, `state.json`, `dataset_info.json`), a row per image with the columns
  __key__ (string), t5_encodings, clip_encodings, mean, logvar (binary: `np.save` of the bfloat16 tensor's
  bits as uint16; T5 [256, 4096], pooled CLIP [768], the VAE posterior's mean and log-variance [16, 32, 32]
  at 256x256), timestep (int32, COCO only: 0..7),
and the empty caption's encodings (`empty_encodings/t5_empty.npy` [1, 256, 4096] and `clip_empty.npy`
[1, 768], float16), which replace a training sample's own for classifier-free guidance dropout.

The files are read with pyarrow, memory-mapped, not through `datasets`: the trainer needs four columns of a
known layout, and pyarrow (already a dependency) reads them without the `datasets` package.

Order, as the reference's loaders (torchtitan's FluxDataset under `split_dataset_by_node`, no shuffling):
each data-parallel rank reads its contiguous share of the rows in order, training looping over its share
without end, validation once. `DATADIR` is the folder the three downloads land in (`cc12m_preprocessed/`,
`coco_preprocessed/`, `empty_encodings/`), as the reference's `/dataset`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from training.flux1.step import Batch

TRAIN, VALID, EMPTY = "cc12m_preprocessed", "coco_preprocessed", "empty_encodings"
COLUMNS = ("t5_encodings", "clip_encodings", "mean", "logvar")
CFG_DROP_PROBABILITY = 0.1  # the reference config's training.classifer_free_guidance_prob


class DataError(ValueError):
    """Data that is not in the published layout; the message names the file and what is wrong."""


def arrow_files(folder: Path) -> list[Path]:
    """The Arrow files of a `save_to_disk` folder, in `state.json`'s order (else sorted)."""
    state = folder / "state.json"
    if state.is_file():
        try:
            names = [f["filename"] for f in json.loads(state.read_text())["_data_files"]]
        except (ValueError, KeyError, TypeError) as err:
            raise DataError(f"{state}: not a Hugging Face datasets state file ({err})") from None
        files = [folder / name for name in names]
    else:
        files = sorted(folder.glob("*.arrow"))
    if not files:
        raise DataError(f"{folder}: no .arrow files (expected the published {folder.name} folder)")
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise DataError(f"{folder}: missing {', '.join(missing)}")
    return files


def tensor_from_npy(blob: bytes) -> torch.Tensor:
    """A stored tensor: `np.save` of bfloat16 bits as uint16, back to bfloat16."""
    array = np.load(io.BytesIO(blob))
    if array.dtype != np.uint16:
        raise DataError(f"expected bfloat16 bits stored as uint16, found {array.dtype}")
    return torch.from_numpy(array).view(torch.bfloat16)


class EncodedImages:
    """One published split, memory-mapped: `len`, and `batch(rows)` the stacked tensors of those rows."""

    def __init__(self, folder: Path):
        import pyarrow as pa

        self.folder = folder
        tables = []
        for path in arrow_files(folder):
            try:
                tables.append(pa.ipc.open_stream(pa.memory_map(str(path))).read_all())
            except pa.ArrowInvalid as err:
                raise DataError(f"{path}: not an Arrow stream file ({err})") from None
        self.table = pa.concat_tables(tables)
        absent = [c for c in COLUMNS if c not in self.table.column_names]
        if absent:
            raise DataError(f"{folder}: no column {', '.join(absent)} (columns: {self.table.column_names})")
        self.columns = {c: self.table.column(c) for c in self.table.column_names}

    def __len__(self) -> int:
        return self.table.num_rows

    def sample_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of each stored tensor, read from the first row."""
        return {c: tuple(tensor_from_npy(self.columns[c][0].as_py()).shape) for c in COLUMNS}

    def batch(self, rows: list[int], timesteps: bool = False) -> Batch:
        """The rows' tensors stacked, and with `timesteps` (validation) their timestep indices."""
        stacked = {
            c: torch.stack([tensor_from_npy(self.columns[c][r].as_py()) for r in rows]) for c in COLUMNS
        }
        timestep = None
        if timesteps:
            timestep = torch.tensor([self.columns["timestep"][r].as_py() for r in rows], dtype=torch.int64)
        return Batch(
            stacked["t5_encodings"], stacked["clip_encodings"], stacked["mean"], stacked["logvar"], timestep
        )


def share(n: int, ranks: int, rank: int) -> range:
    """`rank`'s contiguous share of `n` rows, as `datasets`' `shard(contiguous=True)` splits them (the first
    n % ranks ranks one row more)."""
    div, mod = divmod(n, ranks)
    start = rank * div + min(rank, mod)
    return range(start, start + div + (1 if rank < mod else 0))


def load_empty_encodings(folder: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The empty caption's (T5 [T, D], pooled CLIP [P])."""
    out = []
    for name in ("t5_empty.npy", "clip_empty.npy"):
        path = folder / name
        if not path.is_file():
            raise DataError(f"{path}: missing (the published empty encodings)")
        out.append(torch.from_numpy(np.load(path))[0])
    return out[0], out[1]


class TrainStream:
    """A rank's training micro-batches: its share of the rows in order, looping without end, a micro-batch
    of `micro_batch` consecutive rows (across the end of the share as across any other row); each sample
    carries the empty caption instead of its own with probability 0.1, drawn from the rank's generator."""

    def __init__(
        self,
        data: EncodedImages,
        empty: tuple[torch.Tensor, torch.Tensor],
        micro_batch: int,
        ranks: int,
        rank: int,
        seed: int,
    ):
        self.data, self.micro_batch = data, micro_batch
        self.rows = share(len(data), ranks, rank)
        if len(self.rows) == 0:
            raise DataError(f"{data.folder}: {len(data)} rows cannot feed {ranks} data-parallel ranks")
        self.empty_t5, self.empty_clip = empty
        self.rng = np.random.default_rng([seed, rank])  # each rank its own draws
        self.position = 0

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        rows = [self.rows[(self.position + i) % len(self.rows)] for i in range(self.micro_batch)]
        self.position = (self.position + self.micro_batch) % len(self.rows)
        batch = self.data.batch(rows)
        drop = torch.from_numpy(self.rng.random(self.micro_batch) < CFG_DROP_PROBABILITY)
        if drop.any():
            batch.t5[drop] = self.empty_t5.to(batch.t5.dtype)
            batch.clip[drop] = self.empty_clip.to(batch.clip.dtype)
        return batch


class ValidationSet:
    """A rank's share of the first `samples` validation rows, in micro-batches of `batch_size` (the last may
    be smaller), read from the memory-mapped files at each evaluation (the whole set is gigabytes per rank:
    not kept in memory between evaluations)."""

    def __init__(self, data: EncodedImages, samples: int, batch_size: int, ranks: int, rank: int):
        if "timestep" not in data.columns:
            raise DataError(f"{data.folder}: no timestep column (the validation set tags each sample 0..7)")
        self.data, self.batch_size = data, batch_size
        self.rows = list(share(min(samples, len(data)), ranks, rank))

    def __iter__(self) -> Iterator[Batch]:
        for i in range(0, len(self.rows), self.batch_size):
            yield self.data.batch(self.rows[i : i + self.batch_size], timesteps=True)
