"""Small synthetic BERT data in the prepared layout (packed shards + eval set), and a tiny model config."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from training.bert.data import EVAL_KEYS, TRAIN_KEYS

VOCAB, SEQ = 30522, 512
TINY = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": SEQ,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
}


def make_sequence(rng: np.random.Generator, length: int, max_pred: int = 76):
    """[CLS] a [SEP] b [SEP] with ~15% masked positions (never the special tokens)."""
    ids = rng.integers(1000, 1100, length).astype(np.int16)  # a narrow vocabulary: learnable
    split = int(rng.integers(2, length - 1))
    ids[0], ids[split], ids[-1] = 101, 102, 102
    seg = np.zeros(length, np.int8)
    seg[split + 1 :] = 1
    candidates = np.setdiff1d(np.arange(1, length - 1), [split])
    n_pred = max(1, min(max_pred, round(0.15 * length)))
    pos = np.sort(rng.choice(candidates, n_pred, replace=False)).astype(np.int16)
    labels = ids[pos].copy()
    ids[pos] = 103  # [MASK]
    return ids, seg, pos, labels, np.int8(rng.integers(0, 2))


def vlen(f, name, arrays, dtype):
    ds = f.create_dataset(name, (len(arrays),), dtype=h5py.vlen_dtype(np.dtype(dtype)))
    for i, a in enumerate(arrays):
        ds[i] = np.asarray(a, dtype)


def write_packed_shard(path: Path, rng: np.random.Generator, rows: int) -> None:
    cols = {k: [] for k in TRAIN_KEYS}
    for _ in range(rows):
        lens = [int(x) for x in rng.integers(20, 170, int(rng.integers(1, 4)))]
        seqs = [make_sequence(rng, n) for n in lens]
        offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
        cols["input_ids"].append(np.concatenate([s[0] for s in seqs]))
        cols["segment_ids"].append(np.concatenate([s[1] for s in seqs]))
        cols["masked_lm_positions"].append(np.concatenate([s[2] + o for s, o in zip(seqs, offsets)]))
        cols["masked_lm_ids"].append(np.concatenate([s[3] for s in seqs]))
        cols["packed_input_len"].append(lens)
        cols["packed_masked_lm_len"].append([len(s[2]) for s in seqs])
        cols["next_sentence_labels"].append([s[4] for s in seqs])
    dtypes = {"segment_ids": np.int8, "next_sentence_labels": np.int8}
    with h5py.File(path, "w") as f:
        for k in TRAIN_KEYS:
            vlen(f, k, cols[k], dtypes.get(k, np.int16))


def write_eval(path: Path, rng: np.random.Generator, n: int) -> None:
    seqs = [make_sequence(rng, int(rng.integers(20, 300))) for _ in range(n)]
    with h5py.File(path, "w") as f:
        for i, k in enumerate(EVAL_KEYS[:4]):
            vlen(f, k, [s[i] for s in seqs], np.int8 if k == "segment_ids" else np.int16)
        vlen(f, "next_sentence_labels", [[s[4]] for s in seqs], np.int8)


def write_dataset(root: Path, shards: int = 4, rows: int = 24, eval_samples: int = 64) -> Path:
    """Fill DATADIR `root` with phase1/bert_config.json (tiny), packed shards and an eval set."""
    rng = np.random.default_rng(0)
    (root / "phase1").mkdir()
    (root / "phase1" / "bert_config.json").write_text(json.dumps(TINY))
    packed = root / "hdf5" / "packed_data"
    packed.mkdir(parents=True)
    for i in range(shards):
        write_packed_shard(packed / f"part_{i:05d}", rng, rows)
    (root / "hdf5" / "eval_varlength").mkdir()
    write_eval(root / "hdf5" / "eval_varlength" / "part_eval_10k.hdf5", rng, eval_samples)
    return root
