"""BERT batches for the benches: packed rows filled like the data pipeline's, of random token ids."""

from __future__ import annotations

import numpy as np

SEQ, MAX_PRED = 512, 76
ROWS = 48  # packed rows per step (bench_bert's --rows changes its own)


def random_sequence(rng, length: int, vocab: int):
    ids = rng.integers(1000, vocab, length)
    split = int(rng.integers(2, length - 1))
    ids[0], ids[split], ids[-1] = 101, 102, 102
    seg = (np.arange(length) > split).astype(np.int8)
    n_pred = min(MAX_PRED, max(1, round(0.15 * length)))
    candidates = np.setdiff1d(np.arange(1, length - 1), [split])
    pos = np.sort(rng.choice(candidates, n_pred, replace=False))
    return ids, seg, pos, rng.integers(1000, vocab, n_pred), int(rng.integers(0, 2))


def packed_rows(rng, n_rows: int, vocab: int, seq: int = SEQ):
    """Rows like the packer's: 1, 2 or 3 sequences (1/4, 1/2, 1/4: 2 on average) filling 480-512 tokens."""
    rows = []
    for _ in range(n_rows):
        k = int(rng.choice([1, 2, 3], p=[0.25, 0.5, 0.25]))
        total = int(rng.integers(seq - 32, seq + 1))
        lens = np.array([total])
        while k > 1 and (len(lens) < k or lens.min() < 24):  # k sequences of at least 24 tokens each
            cuts = np.sort(rng.choice(np.arange(24, total - 24), k - 1, replace=False))
            lens = np.diff(np.concatenate([[0], cuts, [total]])).astype(int)
        seqs = [random_sequence(rng, int(n), vocab) for n in lens]
        offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
        rows.append((
            np.concatenate([s[0] for s in seqs]), np.concatenate([s[1] for s in seqs]),
            np.concatenate([s[2] + o for s, o in zip(seqs, offsets)]), np.concatenate([s[3] for s in seqs]),
            lens, np.array([len(s[2]) for s in seqs]), np.array([s[4] for s in seqs]),
        ))  # fmt: skip
    return rows
