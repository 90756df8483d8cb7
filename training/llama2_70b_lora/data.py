"""GovReport rows as AMD's and NVIDIA's code reads them: `train.npy` / `validation.npy`, numpy object arrays
of one dict per row, `input_ids` (MAX_SEQLEN token ids), `loss_mask` (1 where the token is scored) and
`seq_start_id` (where each sequence packed in the row starts; [0] in the MLCommons set: one per row).

A row becomes a micro-batch of the Llama step (`training.llama.step`): the tokens are the row's ids but the
last, padded to MAX_SEQLEN; the label of each is the next id, scored where the next token's loss mask is 1
and never across a sequence's end; positions restart at every sequence and attention stays inside each
(`cu_seqlens`). Several rows in one micro-batch (MBS > 1) are laid end to end in one row of MBS x MAX_SEQLEN.
A micro-batch whose rows hold one sequence each (every row of the MLCommons set) is not packed: its rows are a
(MBS, MAX_SEQLEN) batch under the plain causal attention, the benches' path. Packing one sequence is the same
arithmetic, but its attention is FlashAttention-2's varlen kernel (FlashAttention-2 took 1.7x cuDNN's time
at the 8B's heads on an H100, perf/attention.py) and every block reads the longest sequence back to the host.
Training rows are drawn without replacement in a fresh seeded order every epoch, as NeMo's Megatron sampler
does; each optimizer step takes GBS rows, MINIBS per rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from training.common import outcome

KEYS = ("input_ids", "loss_mask", "seq_start_id")


class DataError(outcome.DataError):
    """Unreadable or malformed data; the message names the file and the row."""


@dataclass
class Rows:
    tokens: torch.Tensor  # (n, seq) int32
    loss_mask: torch.Tensor  # (n, seq) bool
    starts: list[list[int]]  # per row, the first position of each packed sequence

    def __len__(self) -> int:
        return len(self.tokens)


def load_rows(path: Path, seq_length: int, vocab_size: int) -> Rows:
    """Every row of a `.npy` file in the layout above, checked: keys, lengths, mask values, starts, ids."""
    path = Path(path)
    try:
        array = np.load(path, allow_pickle=True)  # the MLCommons layout is pickled dicts (checksummed data)
    except (OSError, ValueError, EOFError) as err:
        raise DataError(f"{path}: unreadable ({err})") from None
    if array.ndim != 1 or len(array) == 0:
        raise DataError(f"{path}: expected a non-empty array of rows, got shape {array.shape}")
    tokens = np.empty((len(array), seq_length), np.int32)
    mask = np.empty((len(array), seq_length), bool)
    starts = []
    for i, row in enumerate(array):
        if not isinstance(row, dict) or any(k not in row for k in KEYS):
            raise DataError(f"{path}: row {i} is not a dict with {', '.join(KEYS)}")
        ids, loss_mask = np.asarray(row["input_ids"]), np.asarray(row["loss_mask"])
        if len(ids) != seq_length or len(loss_mask) != seq_length:
            raise DataError(
                f"{path}: row {i} has {len(ids)} ids and {len(loss_mask)} mask values, not "
                f"MAX_SEQLEN={seq_length}"
            )
        if not np.isin(loss_mask, (0, 1)).all():
            raise DataError(f"{path}: row {i}'s loss_mask holds values other than 0 and 1")
        if ids.min() < 0 or ids.max() >= vocab_size:
            raise DataError(
                f"{path}: row {i} has token ids up to {ids.max()}, outside the vocabulary of {vocab_size}"
            )
        row_starts = [int(s) for s in np.asarray(row["seq_start_id"]).ravel()]
        increasing = all(b > a for a, b in zip(row_starts, row_starts[1:]))
        if not row_starts or row_starts[0] != 0 or not increasing or row_starts[-1] >= seq_length:
            raise DataError(
                f"{path}: row {i}'s seq_start_id {row_starts[:8]} is not increasing from 0 "
                f"within {seq_length}"
            )
        tokens[i], mask[i] = ids, loss_mask.astype(bool)
        starts.append(row_starts)
    return Rows(torch.from_numpy(tokens), torch.from_numpy(mask), starts)


def packed(rows: Rows) -> bool:
    """Whether any row holds more than one sequence."""
    return any(len(starts) > 1 for starts in rows.starts)


def micro_batch(rows: Rows, indices) -> tuple[torch.Tensor, ...]:
    """(tokens, labels) of shape (len(indices), MAX_SEQLEN) when each of the rows `indices` holds one
    sequence, else (tokens, labels, position_ids, cu_seqlens) of the rows laid end to end in one row."""
    pieces = [_row(rows, int(i)) for i in indices]
    if all(len(p[3]) == 1 for p in pieces):
        return torch.stack([p[0] for p in pieces]), torch.stack([p[1] for p in pieces])
    tokens, labels, positions = (torch.cat([p[k] for p in pieces]).unsqueeze(0) for k in range(3))
    seq, bounds = rows.tokens.shape[1], []
    for n, p in enumerate(pieces):
        bounds += [b + n * seq for b in p[3]]
    cu_seqlens = torch.tensor([*bounds, len(pieces) * seq], dtype=torch.int32)
    return tokens, labels, positions, cu_seqlens


def _row(rows: Rows, i: int):
    ids, mask, starts = rows.tokens[i].long(), rows.loss_mask[i], rows.starts[i]
    seq = len(ids)
    tokens = torch.cat([ids[:-1], ids.new_zeros(1)])  # the last position is padding
    labels = torch.full((seq,), -100, dtype=torch.long)
    labels[:-1] = torch.where(mask[1:], ids[1:], -100)
    ends = [s - 1 for s in starts[1:]]  # a sequence's last token: its next is another sequence's first
    labels[ends] = -100
    positions = torch.arange(seq)
    for a, b in zip(starts, [*starts[1:], seq]):
        positions[a:b] -= a
    return tokens, labels, positions, starts


class Sampler:
    """The rows of each optimizer step: a seeded permutation per epoch, GBS rows per step (an epoch's
    remainder dropped), the `minibs` of data-parallel rank `rank` as micro-batches of MBS."""

    def __init__(self, count: int, gbs: int, minibs: int, mbs: int, rank: int, seed: int):
        if count < gbs:
            raise DataError(f"{count} training rows cannot fill a global batch of {gbs}")
        self.count, self.gbs, self.minibs, self.mbs, self.rank, self.seed = (
            count,
            gbs,
            minibs,
            mbs,
            rank,
            seed,
        )
        self.per_epoch = count // gbs

    def step(self, index: int) -> list[np.ndarray]:
        epoch, within = divmod(index, self.per_epoch)
        order = np.random.default_rng(self.seed + epoch).permutation(self.count)
        batch = order[within * self.gbs : (within + 1) * self.gbs]
        mine = batch[self.rank * self.minibs : (self.rank + 1) * self.minibs]
        return [mine[i : i + self.mbs] for i in range(0, self.minibs, self.mbs)]


def eval_batches(rows: Rows, rank: int, world: int) -> tuple[list[tuple], int]:
    """(this rank's validation micro-batches, one row each, and the rounds every rank runs)."""
    mine = range(rank, len(rows), world)
    return [micro_batch(rows, [i]) for i in mine], -(-len(rows) // world)
