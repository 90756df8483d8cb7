"""BERT rows for the benches: packed rows filled like the data pipeline's, of random token ids
(`packed_rows`), and rows of the excerpt's text, one sequence each, for the loss curves (`text_rows`)."""

from __future__ import annotations

import numpy as np

from perf.lib import text

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
        rows.append(
            (
                np.concatenate([s[0] for s in seqs]),
                np.concatenate([s[1] for s in seqs]),
                np.concatenate([s[2] + o for s, o in zip(seqs, offsets)]),
                np.concatenate([s[3] for s in seqs]),
                lens,
                np.array([len(s[2]) for s in seqs]),
                np.array([s[4] for s in seqs]),
            )
        )
    return rows


def text_rows(count: int, seq: int = 128, seed: int = 0) -> list[tuple[np.ndarray, ...]]:
    """Rows of the excerpt's text in the trainer's layout (one sequence each): [CLS] A [SEP] B [SEP], B the
    text after A or (label 1) a window from elsewhere, 15% of the positions masked with [MASK]."""
    rng = np.random.default_rng(seed)
    stream = text.wiki_ids()
    half = (seq - 3) // 2
    out = []
    for _ in range(count):
        start = int(rng.integers(0, len(stream) - 2 * seq))
        a = stream[start : start + half]
        is_random = int(rng.integers(0, 2))
        b_start = int(rng.integers(0, len(stream) - seq)) if is_random else start + half
        b = stream[b_start : b_start + seq - 3 - half]
        ids = np.concatenate([[text.CLS], a, [text.SEP], b, [text.SEP]]).astype(np.int64)
        seg = np.concatenate([np.zeros(len(a) + 2), np.ones(len(b) + 1)]).astype(np.int64)
        candidates = np.setdiff1d(np.arange(1, seq - 1), [len(a) + 1])
        pos = np.sort(rng.choice(candidates, round(0.15 * seq), replace=False))
        labels = ids[pos].copy()
        ids[pos] = text.MASK
        out.append((ids, seg, pos, labels, np.array([seq]), np.array([len(pos)]), np.array([is_random])))
    return out
