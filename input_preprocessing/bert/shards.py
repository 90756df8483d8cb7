"""From per-text-part sequence files to N shuffled training shards, without ever holding the data set in
memory (the full one is about 157M sequences):

1. plan (one process): read every part's sequence lengths, decide the rows (packed: up to 3 sequences per
   row by `packing.pack_histogram`; unpacked: one per row), shuffle the rows with a fixed seed, and cut them
   into N contiguous blocks, one per shard. Every sequence gets a destination key
   `shard << 34 | row_in_shard << 2 | slot`, saved per part in `plan.h5`.
2. scatter (per part, in parallel): reorder the part's sequences by destination key and save them with the
   offsets at which each shard's sequences begin.
3. gather (per group of shards, in parallel): read each shard's slice from every part, sort by key, write
   the shard. A row's sequences are adjacent after the sort, in slot order.
Rows are disjoint by construction, so no two shards share a sequence; the plan checks that every sequence
is placed exactly once.
"""

import math
from pathlib import Path

import h5py
import numpy as np

from input_preprocessing.common.runtime import PrepError
from training.common.files import atomic_path

from .packing import assign_rows, pack_histogram, packing_stats
from .ragged import Sequences, read_lengths, write_packed, write_unpacked

SHUFFLE_SEED = 12345
ROW_BITS, SLOT_BITS = 32, 2


def _key_fields(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shard = keys >> (ROW_BITS + SLOT_BITS)
    row = (keys >> SLOT_BITS) & ((1 << ROW_BITS) - 1)
    return shard, row, keys & ((1 << SLOT_BITS) - 1)


def make_plan(
    example_files: list[Path], plan_path: Path, n_shards: int, packed: bool, max_seq_length: int
) -> dict:
    """Decide every sequence's shard, row and slot; write them to `plan_path`; return packing statistics."""
    lengths_per_part = [read_lengths(p).astype(np.int64) for p in example_files]
    lengths = np.concatenate(lengths_per_part) if lengths_per_part else np.zeros(0, np.int64)
    hist = np.bincount(lengths, minlength=max_seq_length + 1)
    combos = (
        pack_histogram(hist, max_seq_length) if packed else {(n,): int(c) for n, c in enumerate(hist) if c}
    )
    stats = packing_stats(hist, combos, max_seq_length)
    n_rows = stats["rows"]
    if n_rows < n_shards:
        raise PrepError(
            f"only {n_rows} training rows for --shards {n_shards}: every shard needs at least one; "
            f"use --shards {n_rows} or fewer, or more text"
        )
    if n_rows // n_shards >= 1 << ROW_BITS:
        raise PrepError(f"--shards {n_shards}: shards of {n_rows // n_shards} rows are too large")
    rows = assign_rows(lengths, combos, SHUFFLE_SEED)  # (n_rows, 3), shuffled
    bounds = np.arange(n_shards + 1, dtype=np.int64) * n_rows // n_shards
    shard_of_row = np.searchsorted(bounds, np.arange(n_rows), side="right") - 1
    row_in_shard = np.arange(n_rows) - bounds[shard_of_row]
    keys = np.full(len(lengths), -1, dtype=np.int64)
    for slot in range(rows.shape[1]):
        present = rows[:, slot] >= 0
        keys[rows[present, slot]] = (
            (shard_of_row[present] << (ROW_BITS + SLOT_BITS)) | (row_in_shard[present] << SLOT_BITS) | slot
        )
    if (keys < 0).any():
        raise AssertionError("plan left a sequence without a row")
    starts = np.cumsum([0] + [len(x) for x in lengths_per_part])
    with atomic_path(plan_path) as tmp, h5py.File(tmp, "w") as f:
        for path, a, b in zip(example_files, starts[:-1], starts[1:]):
            f.create_dataset(path.name, data=keys[a:b])
        f.attrs["shards"] = n_shards
        f.attrs["packed"] = packed
    stats["rows_per_shard"] = [int(n_rows // n_shards), int(math.ceil(n_rows / n_shards))]
    return stats


def scatter_part(task: tuple[Path, Path, Path, bool]) -> str:
    """Worker: one part's sequences, reordered by destination, with per-shard offsets. Unless `keep`, the
    part's example file is removed once this copy is written (it is not needed again)."""
    example_file, plan_path, out, keep = task
    if out.exists():
        if not keep:
            example_file.unlink(missing_ok=True)
        return out.name
    with h5py.File(plan_path, "r") as f:
        keys = f[example_file.name][:]
        n_shards = int(f.attrs["shards"])
    seqs = Sequences.load(example_file)
    order = np.argsort(keys, kind="stable")
    seqs, keys = seqs.take(order), keys[order]
    shard, _, _ = _key_fields(keys)
    seq_off = np.searchsorted(shard, np.arange(n_shards + 1))
    token_off = np.concatenate([[0], np.cumsum(seqs.seq_len, dtype=np.int64)])[seq_off]
    mask_off = np.concatenate([[0], np.cumsum(seqs.mlm_count, dtype=np.int64)])[seq_off]
    offsets = {"shard_seq_offsets": seq_off, "shard_token_offsets": token_off, "shard_mask_offsets": mask_off}
    seqs.save(out, {"keys": keys, **offsets})
    if not keep:
        example_file.unlink()
    return out.name


def shard_path(folder: Path, shard: int, n_shards: int, packed: bool) -> Path:
    return folder / (f"part_{shard:05d}" if packed else f"part_{shard:05d}_of_{n_shards:05d}.hdf5")


def _read_range(path: Path, first: int, last: int) -> tuple[Sequences, np.ndarray]:
    """Sequences of shards first..last-1 from one scattered part."""
    with h5py.File(path, "r") as f:
        so = f["shard_seq_offsets"][[first, last]]
        to = f["shard_token_offsets"][[first, last]]
        mo = f["shard_mask_offsets"][[first, last]]
        keys = f["keys"][so[0] : so[1]]
    seqs = Sequences.load(path, slice(so[0], so[1]), slice(to[0], to[1]), slice(mo[0], mo[1]))
    return seqs, keys


def gather_shards(task: tuple[list[Path], int, int, int, bool, Path]) -> dict:
    """Worker: write shards first..last-1 from all scattered parts (shards already written are skipped)."""
    scattered, first, last, n_shards, packed, folder = task
    todo = [s for s in range(first, last) if not shard_path(folder, s, n_shards, packed).exists()]
    if todo:
        pieces = [_read_range(p, todo[0], todo[-1] + 1) for p in scattered]
        seqs = Sequences.concat([s for s, _ in pieces])
        keys = np.concatenate([k for _, k in pieces])
        order = np.argsort(keys, kind="stable")
        seqs, keys = seqs.take(order), keys[order]
        shard, row, slot = _key_fields(keys)
        bounds = np.searchsorted(shard, np.arange(todo[0], todo[-1] + 2))
        for s in todo:
            a, b = bounds[s - todo[0]], bounds[s - todo[0] + 1]
            if a == b:
                raise AssertionError(f"shard {s} would be empty")
            part = seqs.take(np.arange(a, b))
            seqs_per_row = np.bincount(row[a:b])
            if (seqs_per_row == 0).any() or (slot[a:b] != _slots(seqs_per_row)).any():
                raise AssertionError(f"shard {s}: rows are not complete and in slot order")
            if packed:
                write_packed(shard_path(folder, s, n_shards, packed), part, seqs_per_row)
            else:
                write_unpacked(shard_path(folder, s, n_shards, packed), part)
    return {"first": first, "last": last, "written": len(todo)}


def _slots(seqs_per_row: np.ndarray) -> np.ndarray:
    """0, 1, ..., k-1 for every row of k sequences, concatenated."""
    total = int(seqs_per_row.sum())
    starts = np.repeat(np.cumsum(seqs_per_row) - seqs_per_row, seqs_per_row)
    return np.arange(total) - starts
