"""Real text for the loss comparisons of `perf/`: the bundled Wikipedia excerpt as BERT WordPiece ids.

Every model here takes them: the ids are below 30,522 (BERT's vocabulary), which fits Llama 2's 32,000 and
Llama 3's 128,256 embedding tables. Not the benchmarks' tokenizers: the curves compare implementations on the
same text, not with published numbers. Cached next to the excerpt's checksum under $TMPDIR.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

SAMPLE = Path(__file__).resolve().parents[2] / "input_preprocessing" / "bert" / "sample"
CLS, SEP, MASK = 101, 102, 103


def wiki_ids() -> np.ndarray:
    """The excerpt's articles, lower-cased WordPiece ids, one stream (a [SEP] between articles)."""
    dump = SAMPLE / "enwiki_sample.xml.bz2"
    digest = hashlib.sha256(dump.read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("TMPDIR", tempfile.gettempdir())) / f"wiki_wordpiece_{digest}.npy"
    if cache.exists():
        return np.load(cache)
    from tokenizers import BertWordPieceTokenizer

    from input_preprocessing.common.wikitext import extract_articles

    tokenizer = BertWordPieceTokenizer(str(SAMPLE / "bert_uncased_vocab.txt"), lowercase=True)
    ids: list[int] = []
    for text in extract_articles(dump):
        ids += tokenizer.encode(text.replace("\n", " "), add_special_tokens=False).ids + [SEP]
    stream = np.asarray(ids, dtype=np.int32)
    tmp = cache.with_suffix(f".{os.getpid()}.npy")
    np.save(tmp, stream)
    tmp.replace(cache)
    return stream


def rows(stream: np.ndarray, count: int, length: int, offset: int = 0) -> np.ndarray:
    """`count` consecutive windows of `length` ids from `offset` (wrapping around the stream)."""
    need = offset + count * length
    reps = -(-need // len(stream))
    flat = np.tile(stream, reps)[offset:need]
    return flat.reshape(count, length).astype(np.int64)
