"""Packed HDF5 shards -> `Batch`es, and the eval set.

Training shards (`part_*` in `hdf5/packed_data`, or NVIDIA's `packed_data`) hold one packed row per entry
(vlen datasets `input_ids`, `segment_ids`, `masked_lm_positions`, `masked_lm_ids`, `packed_input_len`,
`packed_masked_lm_len`, `next_sentence_labels`). Every epoch the shard list is permuted with the run's
seed; rank r reads shards r, r + world, ... of that permutation, so ranks never share data, and rows are
shuffled within each shard. A background thread reads and collates ahead of the training loop.

The eval set (`eval_varlength/*.hdf5`, one sequence per entry) is packed into rows the same way (up to
three sequences per row, in file order) so eval runs on the same model path.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import torch

from training.bert.model import Batch
from training.common import outcome

TRAIN_KEYS = (
    "input_ids",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "packed_input_len",
    "packed_masked_lm_len",
    "next_sentence_labels",
)
EVAL_KEYS = ("input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids", "next_sentence_labels")
MAX_SEQS_PER_ROW = 3
# Masked tokens per packed row: at most round(0.15 * length) per sequence, so 0.15 * 512 plus rounding.
MASKED_PER_ROW = 80


# Where a DATADIR keeps the packed training shards: this toolkit's and AMD's folder, then NVIDIA's (its
# prepare_data.sh --packed-data writes DATADIR/packed_data, its shard_list_*.lst files beside the shards).
PACKED_DIRS = ("hdf5/packed_data", "packed_data")


class DataError(outcome.DataError):
    """A missing, empty or unreadable data file; the message names it."""


def default_train_dir(datadir: Path) -> Path:
    """The first of PACKED_DIRS under `datadir` holding `part_*` shards (the first of them if none does)."""
    for rel in PACKED_DIRS:
        folder = datadir / rel
        if folder.is_dir() and any(p.name.startswith("part_") and p.is_file() for p in folder.iterdir()):
            return folder
    return datadir / PACKED_DIRS[0]


def list_shards(train_dir: Path) -> list[Path]:
    if not train_dir.is_dir():
        raise DataError(f"training data folder {train_dir} does not exist")
    shards = sorted(p for p in train_dir.iterdir() if p.name.startswith("part_") and p.is_file())
    if not shards:
        raise DataError(f"no part_* shards in {train_dir}")
    return shards


def read_rows(path: Path, keys=TRAIN_KEYS) -> list[tuple[np.ndarray, ...]]:
    """All entries of one shard as tuples of arrays, in `keys` order."""
    try:
        with h5py.File(path, "r") as f:
            missing = [k for k in keys if k not in f]
            if missing:
                raise DataError(f"{path}: missing datasets {', '.join(missing)}")
            columns = [f[k][:] for k in keys]
    except OSError as err:
        raise DataError(f"{path}: cannot read HDF5 ({err})") from None
    rows = list(zip(*columns, strict=True))
    if not rows:
        raise DataError(f"{path}: shard holds no rows")
    return rows


def collate(rows: list[tuple[np.ndarray, ...]], seq_len: int) -> Batch:
    """Packed rows (TRAIN_KEYS order) -> one Batch of flat index tensors over [len(rows), seq_len]."""
    B = len(rows)
    input_ids = np.zeros((B, seq_len), np.int64)
    segment_ids = np.zeros((B, seq_len), np.int64)
    position_ids = np.zeros((B, seq_len), np.int64)
    seq_ids = np.zeros((B, seq_len), np.int32)
    cu, mlm_index, mlm_labels, cls_index, nsp_labels = [0], [], [], [], []
    for b, (ids, seg, mpos, mids, lens, _mlens, nsp) in enumerate(rows):
        n = len(ids)
        if n > seq_len or int(np.sum(lens)) != n:
            raise DataError(f"row of {n} tokens with sequence lengths {list(lens)} does not fit {seq_len}")
        input_ids[b, :n], segment_ids[b, :n] = ids, seg
        start, base = 0, b * seq_len
        for i, length in enumerate(int(x) for x in lens):
            position_ids[b, start : start + length] = np.arange(length)
            seq_ids[b, start : start + length] = i + 1
            cls_index.append(base + start)
            start += length
            cu.append(base + start)
        if n < seq_len:
            cu.append(base + seq_len)  # the row's padding is one more (ignored) segment
        mlm_index.append(base + np.asarray(mpos, np.int64))
        mlm_labels.append(np.asarray(mids, np.int64))
        nsp_labels.extend(int(x) for x in nsp)
    cu_seqlens = np.asarray(cu, np.int32)
    return Batch(
        input_ids=torch.from_numpy(input_ids),
        segment_ids=torch.from_numpy(segment_ids),
        position_ids=torch.from_numpy(position_ids),
        seq_ids=torch.from_numpy(seq_ids),
        cu_seqlens=torch.from_numpy(cu_seqlens),
        mlm_index=torch.from_numpy(np.concatenate(mlm_index)),
        mlm_labels=torch.from_numpy(np.concatenate(mlm_labels)),
        cls_index=torch.tensor(cls_index, dtype=torch.int64),
        nsp_labels=torch.tensor(nsp_labels, dtype=torch.int64),
        num_sequences=len(cls_index),
    )


def pad_static(b: Batch, rows: int, masked_per_row: int = MASKED_PER_ROW) -> Batch:
    """Pad the per-sequence and per-mask index lists to fixed lengths (ignored labels), so that every
    batch of `rows` rows has one shape: what torch.compile and CUDA graphs need."""
    m, s, c = rows * masked_per_row, rows * MAX_SEQS_PER_ROW, rows * (MAX_SEQS_PER_ROW + 1) + 1
    if len(b.mlm_index) > m or b.num_sequences > s:
        raise DataError(
            f"batch of {rows} rows has {len(b.mlm_index)} masked tokens (> {m}) "
            f"or {b.num_sequences} sequences (> {s})"
        )

    def pad(t, n, value):
        return torch.cat([t, t.new_full((n - len(t),), value)])

    return Batch(
        **{
            **b.__dict__,
            "mlm_index": pad(b.mlm_index, m, 0),
            "mlm_labels": pad(b.mlm_labels, m, -100),
            "cls_index": pad(b.cls_index, s, 0),
            "nsp_labels": pad(b.nsp_labels, s, -100),
            "cu_seqlens": pad(b.cu_seqlens, c, int(b.cu_seqlens[-1])),
        }
    )


def synthetic_rows(n: int, seq_len: int, seed: int = 0) -> list[tuple[np.ndarray, ...]]:
    """`n` packed rows of random tokens (two sequences each, 15% masked): warm-up input, never trained on."""
    rng = np.random.default_rng(seed)
    half = seq_len // 2
    lens = np.array([half, seq_len - half], np.int16)
    n_pred = [round(0.15 * int(x)) for x in lens]
    pos = np.concatenate(
        [
            np.sort(rng.choice(np.arange(1, int(x) - 1), k, replace=False)) + off
            for x, k, off in zip(lens, n_pred, (0, half))
        ]
    )
    ids, labels = rng.integers(1000, 30000, seq_len), rng.integers(1000, 30000, len(pos))
    row = (
        ids,
        np.repeat(np.int8([0, 1]), lens),
        pos,
        labels,
        lens,
        np.array(n_pred, np.int16),
        np.array([0, 1], np.int8),
    )
    return [row] * n


def pack_sequences(samples: list[tuple[np.ndarray, ...]], seq_len: int) -> list[tuple[np.ndarray, ...]]:
    """Unpacked (EVAL_KEYS order) samples -> packed rows (TRAIN_KEYS order), in order, up to 3 per row."""
    rows, current = [], []

    def flush():
        lens = np.array([len(s[0]) for s in current], np.int16)
        offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
        rows.append(
            (
                np.concatenate([s[0] for s in current]),
                np.concatenate([s[1] for s in current]),
                np.concatenate([np.asarray(s[2], np.int64) + off for s, off in zip(current, offsets)]),
                np.concatenate([s[3] for s in current]),
                lens,
                np.array([len(s[2]) for s in current], np.int16),
                np.array([int(np.ravel(s[4])[0]) for s in current], np.int8),
            )
        )
        current.clear()

    for s in samples:
        if current and (
            len(current) == MAX_SEQS_PER_ROW or sum(len(c[0]) for c in current) + len(s[0]) > seq_len
        ):
            flush()
        current.append(s)
    if current:
        flush()
    return rows


def train_batches(
    shards: list[Path],
    rank: int,
    world: int,
    rows_per_batch: int,
    seq_len: int,
    seed: int,
    static: bool = False,
) -> Iterator[Batch]:
    """Endless stream of this rank's batches; epochs re-permute the shards. `static` pads every batch
    to one shape (`pad_static`)."""
    if len(shards) < world:
        raise DataError(f"{len(shards)} training shards cannot feed {world} ranks; prepare at least {world}")
    pending: list = []
    for epoch in range(1_000_000):
        order = np.random.default_rng([seed, epoch]).permutation(len(shards))
        for i in order[rank::world]:
            rows = read_rows(shards[i])
            perm = np.random.default_rng([seed, epoch, int(i)]).permutation(len(rows))
            pending.extend(rows[j] for j in perm)
            while len(pending) >= rows_per_batch:
                batch = collate(pending[:rows_per_batch], seq_len)
                yield pad_static(batch, rows_per_batch) if static else batch
                del pending[:rows_per_batch]


class Prefetcher:
    """Runs a batch iterator in a background thread, `depth` batches ahead; re-raises its errors."""

    _DONE = object()

    def __init__(self, batches: Iterator[Batch], device: torch.device, depth: int = 4):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._pin = device.type == "cuda"
        self._thread = threading.Thread(target=self._work, args=(batches,), daemon=True)
        self._thread.start()

    def _work(self, batches):
        try:
            for batch in batches:
                if self._pin:
                    batch = Batch(
                        **{
                            k: v.pin_memory() if isinstance(v, torch.Tensor) else v
                            for k, v in batch.__dict__.items()
                        }
                    )
                self._queue.put(batch)
        except BaseException as err:  # noqa: BLE001 - handed to the consumer thread
            self._queue.put(err)
        self._queue.put(self._DONE)

    def __iter__(self):
        return self

    def __next__(self) -> Batch:
        item = self._queue.get()
        if item is self._DONE:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item


def eval_batches(
    eval_dir: Path, num_examples: int, rank: int, world: int, rows_per_batch: int, seq_len: int
) -> list[Batch]:
    """This rank's share of the first `num_examples` eval samples, packed into rows and batched."""
    files = sorted(eval_dir.glob("*.hdf5")) if eval_dir.is_dir() else []
    if not files:
        raise DataError(f"no eval *.hdf5 file in {eval_dir}")
    samples = [s for f in files for s in read_rows(f, EVAL_KEYS)][:num_examples]
    rows = pack_sequences(samples[rank::world], seq_len)
    return [collate(rows[i : i + rows_per_batch], seq_len) for i in range(0, len(rows), rows_per_batch)]


def count_eval_examples(eval_dir: Path, num_examples: int) -> int:
    """How many eval samples a run will use (fewer than asked when the prepared set is smaller)."""
    total = 0
    for f in sorted(eval_dir.glob("*.hdf5")):
        with h5py.File(f, "r") as h:
            total += len(h["input_ids"])
    return min(total, num_examples)
