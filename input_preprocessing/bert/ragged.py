"""Pretraining sequences as flat ("ragged") arrays, the pipeline's intermediate format, and the writers of
the final variable-length HDF5 files.

A `Sequences` holds n sequences: their tokens concatenated (`input_ids`, `segment_ids`, with `seq_len`
per sequence) and their masked positions concatenated (`masked_lm_positions` relative to the sequence
start, `masked_lm_ids`, with `mlm_count` per sequence), plus `next_sentence_labels`. Slicing, reordering and
concatenating these is cheap numpy work, and an HDF5 file of them reads back in a few large reads.
"""

from dataclasses import dataclass, fields
from pathlib import Path

import h5py
import numpy as np

from training.common.files import atomic_path

TOKEN_FIELDS = ("input_ids", "segment_ids")
MASK_FIELDS = ("masked_lm_positions", "masked_lm_ids")
SEQ_FIELDS = ("seq_len", "mlm_count", "next_sentence_labels")


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def ragged_take(values: np.ndarray, lengths: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Concatenate the segments `order[0], order[1], ...` of `values` (segment i has `lengths[i]` items)."""
    starts = _offsets(lengths)[:-1]
    picked = lengths[order].astype(np.int64)
    if picked.sum() == 0:
        return values[:0]
    # Index of every output item: its segment's start plus its position within the segment.
    seg_starts = np.repeat(starts[order], picked)
    within = np.arange(picked.sum()) - np.repeat(_offsets(picked)[:-1], picked)
    return values[seg_starts + within]


@dataclass
class Sequences:
    input_ids: np.ndarray  # int16, all tokens
    segment_ids: np.ndarray  # int8, one per token
    masked_lm_positions: np.ndarray  # int16, relative to the sequence's first token
    masked_lm_ids: np.ndarray  # int16
    seq_len: np.ndarray  # int16, tokens per sequence
    mlm_count: np.ndarray  # int16, masked positions per sequence
    next_sentence_labels: np.ndarray  # int8, 1 = B is a random sentence

    def __len__(self) -> int:
        return len(self.seq_len)

    def take(self, order: np.ndarray) -> "Sequences":
        """The sequences `order[0], order[1], ...` as a new `Sequences`."""
        return Sequences(
            input_ids=ragged_take(self.input_ids, self.seq_len, order),
            segment_ids=ragged_take(self.segment_ids, self.seq_len, order),
            masked_lm_positions=ragged_take(self.masked_lm_positions, self.mlm_count, order),
            masked_lm_ids=ragged_take(self.masked_lm_ids, self.mlm_count, order),
            seq_len=self.seq_len[order],
            mlm_count=self.mlm_count[order],
            next_sentence_labels=self.next_sentence_labels[order],
        )

    @staticmethod
    def concat(parts: list["Sequences"]) -> "Sequences":
        return Sequences(
            **{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Sequences)}
        )

    def save(self, path: Path, extra: dict[str, np.ndarray] | None = None) -> None:
        """Write atomically to `path` (HDF5, one flat dataset per field, plus `extra` datasets)."""
        with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
            for field in fields(self):
                f.create_dataset(field.name, data=getattr(self, field.name))
            for name, value in (extra or {}).items():
                f.create_dataset(name, data=value)

    @staticmethod
    def load(path: Path, seq: slice = slice(None), token: slice = slice(None), mask: slice = slice(None)):
        """Read `path`, or the sequences `seq` of it when the matching `token` and `mask` slices are given."""
        with h5py.File(path, "r") as f:
            parts = {name: f[name][token] for name in TOKEN_FIELDS}
            parts.update({name: f[name][mask] for name in MASK_FIELDS})
            parts.update({name: f[name][seq] for name in SEQ_FIELDS})
        return Sequences(**parts)


def read_lengths(path: Path) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f["seq_len"][:]


def _vlen(f: h5py.File, name: str, dtype, values: np.ndarray, lengths: np.ndarray) -> None:
    ds = f.create_dataset(name, (len(lengths),), dtype=h5py.vlen_dtype(np.dtype(dtype)))
    if len(lengths):
        ds[...] = np.split(values.astype(dtype, copy=False), _offsets(lengths)[1:-1])


def write_unpacked(path: Path, seqs: Sequences) -> None:
    """NVIDIA's variable-length layout, one sample per sequence: vlen `input_ids` (int16), `segment_ids`
    (int8), `masked_lm_positions` (int16), `masked_lm_ids` (int16); `next_sentence_labels` (int8, one per
    sample)."""
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        _vlen(f, "input_ids", np.int16, seqs.input_ids, seqs.seq_len)
        _vlen(f, "segment_ids", np.int8, seqs.segment_ids, seqs.seq_len)
        _vlen(f, "masked_lm_positions", np.int16, seqs.masked_lm_positions, seqs.mlm_count)
        _vlen(f, "masked_lm_ids", np.int16, seqs.masked_lm_ids, seqs.mlm_count)
        f.create_dataset("next_sentence_labels", data=seqs.next_sentence_labels.astype(np.int8))


def write_packed(path: Path, seqs: Sequences, seqs_per_row: np.ndarray) -> None:
    """NVIDIA's packed layout: consecutive sequences of `seqs` form rows (`seqs_per_row[r]` of them in row
    r). Per row: `input_ids`, `segment_ids` (the sequences' tokens concatenated, unpadded),
    `masked_lm_positions` (offsets into the row), `masked_lm_ids`, `packed_input_len` (each sequence's
    length), `packed_masked_lm_len` (each sequence's number of masked positions), `next_sentence_labels`
    (one per sequence); all variable-length."""
    row_of_seq = np.repeat(np.arange(len(seqs_per_row)), seqs_per_row)
    row_tokens = np.bincount(row_of_seq, weights=seqs.seq_len, minlength=len(seqs_per_row)).astype(np.int64)
    row_masks = np.bincount(row_of_seq, weights=seqs.mlm_count, minlength=len(seqs_per_row)).astype(np.int64)
    # A masked position becomes an offset into its row: add its sequence's start within the row.
    seq_start = _offsets(seqs.seq_len)[:-1]
    row_start = _offsets(row_tokens)[:-1]
    shift = (seq_start - row_start[row_of_seq]).astype(np.int64)
    positions = seqs.masked_lm_positions.astype(np.int64) + np.repeat(shift, seqs.mlm_count)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        _vlen(f, "input_ids", np.int16, seqs.input_ids, row_tokens)
        _vlen(f, "segment_ids", np.int8, seqs.segment_ids, row_tokens)
        _vlen(f, "masked_lm_positions", np.int16, positions, row_masks)
        _vlen(f, "masked_lm_ids", np.int16, seqs.masked_lm_ids, row_masks)
        _vlen(f, "packed_input_len", np.int16, seqs.seq_len, seqs_per_row)
        _vlen(f, "packed_masked_lm_len", np.int16, seqs.mlm_count, seqs_per_row)
        _vlen(f, "next_sentence_labels", np.int8, seqs.next_sentence_labels, seqs_per_row)
