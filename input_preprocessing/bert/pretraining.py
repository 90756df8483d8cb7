"""Masked-LM / next-sentence pretraining examples from text, following MLCommons' (Google's)
`create_pretraining_data.py` step for step and random draw for draw, so that with the same text,
vocabulary and seed the same examples come out (this is what fixes the eval set everyone scores on).

Input: one sentence per line, a blank line between documents. Every document is tokenized; documents are
shuffled; then, `dupe_factor` times, each document is cut into chunks of sentences that fill a target
length (512 - 3 tokens, or with probability 0.1 a random shorter one), each chunk split at a random sentence
into A and B, with B replaced half the time by text from a random other document (next-sentence label 1).
The pair is truncated to fit (a random end each time), framed as [CLS] A [SEP] B [SEP], and 15% of its
tokens (at most 76) are picked for prediction: 80% become [MASK], 10% a random vocabulary token, 10% stay.
All instances of the file are shuffled at the end. One `random.Random(seed)` drives everything, in the
reference's order of calls.
"""

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .ragged import Sequences, read_lengths
from .tokenization import CLS, MASK, SEP, BertTokenizer, load_vocab


@dataclass(frozen=True)
class PretrainingParams:
    """MLCommons' values (`create_pretraining_data.py` flags in the BERT reference)."""

    max_seq_length: int = 512
    max_predictions_per_seq: int = 76
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    random_seed: int = 12345


def read_documents(path: Path, tokenizer: BertTokenizer) -> list[list[list[int]]]:
    """Documents of token-id sentences; empty lines separate documents, empty documents are dropped."""
    documents: list[list[list[int]]] = [[]]
    # Lines end at "\n" only, as TensorFlow's GFile reads them (a stray "\r" stays inside its line).
    with open(path, encoding="utf-8", errors="ignore", newline="\n") as f:
        for line in f:
            line = line.strip()
            if not line:
                documents.append([])
                continue
            ids = tokenizer.ids(line)
            if ids:
                documents[-1].append(ids)
    return [d for d in documents if d]


@dataclass
class _Instance:
    tokens: np.ndarray  # int16
    len_segment_a: int  # tokens of [CLS] A [SEP]
    positions: np.ndarray  # int16
    labels: np.ndarray  # int16
    is_random_next: bool


class _Maker:
    def __init__(self, documents, vocab_size: int, cls: int, sep: int, mask: int, params, rng):
        self.documents, self.vocab_size, self.params, self.rng = documents, vocab_size, params, rng
        self.cls, self.sep, self.mask = cls, sep, mask

    def from_document(self, index: int) -> list[_Instance]:
        rng, documents, p = self.rng, self.documents, self.params
        document = documents[index]
        max_num_tokens = p.max_seq_length - 3
        target_seq_length = max_num_tokens
        if rng.random() < p.short_seq_prob:
            target_seq_length = rng.randint(2, max_num_tokens)

        instances: list[_Instance] = []
        chunk: list[list[int]] = []
        chunk_length = 0
        i = 0
        while i < len(document):
            chunk.append(document[i])
            chunk_length += len(document[i])
            if i == len(document) - 1 or chunk_length >= target_seq_length:
                if chunk:
                    a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                    tokens_a = [t for segment in chunk[:a_end] for t in segment]
                    tokens_b: list[int] = []
                    if len(chunk) == 1 or rng.random() < 0.5:
                        is_random_next = True
                        target_b_length = target_seq_length - len(tokens_a)
                        for _ in range(10):
                            random_index = rng.randint(0, len(documents) - 1)
                            if random_index != index:
                                break
                        random_document = documents[random_index]
                        for segment in random_document[rng.randint(0, len(random_document) - 1) :]:
                            tokens_b.extend(segment)
                            if len(tokens_b) >= target_b_length:
                                break
                        # The unused segments of this chunk are put back for the next one.
                        i -= len(chunk) - a_end
                    else:
                        is_random_next = False
                        tokens_b = [t for segment in chunk[a_end:] for t in segment]
                    self._truncate_pair(tokens_a, tokens_b, max_num_tokens)
                    if not tokens_a or not tokens_b:
                        raise ValueError(
                            f"empty segment in document {index} (a: {len(tokens_a)}, b: {len(tokens_b)})"
                        )
                    tokens = [self.cls, *tokens_a, self.sep, *tokens_b, self.sep]
                    instances.append(self._mask(tokens, len(tokens_a) + 2, is_random_next))
                chunk = []
                chunk_length = 0
            i += 1
        return instances

    def _truncate_pair(self, tokens_a: list[int], tokens_b: list[int], max_num_tokens: int) -> None:
        rng = self.rng
        while len(tokens_a) + len(tokens_b) > max_num_tokens:
            longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
            if rng.random() < 0.5:
                del longer[0]
            else:
                longer.pop()

    def _mask(self, tokens: list[int], len_segment_a: int, is_random_next: bool) -> _Instance:
        rng, p = self.rng, self.params
        candidates = [i for i, t in enumerate(tokens) if t != self.cls and t != self.sep]
        rng.shuffle(candidates)
        output = list(tokens)
        num_to_predict = min(p.max_predictions_per_seq, max(1, int(round(len(tokens) * p.masked_lm_prob))))
        picked = sorted(candidates[:num_to_predict])
        # The reference draws per pick in shuffled order; the draws must follow that order.
        for index in candidates[:num_to_predict]:
            if rng.random() < 0.8:
                output[index] = self.mask
            elif rng.random() >= 0.5:
                output[index] = rng.randint(0, self.vocab_size - 1)
        return _Instance(
            tokens=np.asarray(output, dtype=np.int16),
            len_segment_a=len_segment_a,
            positions=np.asarray(picked, dtype=np.int16),
            labels=np.asarray([tokens[i] for i in picked], dtype=np.int16),
            is_random_next=is_random_next,
        )


def create_instances(
    documents: list[list[list[int]]], vocab: dict[str, int], params: PretrainingParams
) -> Sequences:
    """All pretraining instances of one text file, in the reference's final (shuffled) order."""
    if len(vocab) > np.iinfo(np.int16).max + 1:
        raise ValueError(f"vocabulary of {len(vocab)} tokens does not fit the int16 HDF5 format")
    rng = random.Random(params.random_seed)
    rng.shuffle(documents)
    maker = _Maker(documents, len(vocab), vocab[CLS], vocab[SEP], vocab[MASK], params, rng)
    instances: list[_Instance] = []
    for _ in range(params.dupe_factor):
        for index in range(len(documents)):
            instances.extend(maker.from_document(index))
    rng.shuffle(instances)
    return _to_sequences(instances)


def _to_sequences(instances: list[_Instance]) -> Sequences:
    seq_len = np.fromiter((len(x.tokens) for x in instances), dtype=np.int16, count=len(instances))
    segment_ids = np.ones(int(seq_len.sum()), dtype=np.int8)
    start = 0
    for x in instances:
        segment_ids[start : start + x.len_segment_a] = 0
        start += len(x.tokens)
    empty16 = np.zeros(0, dtype=np.int16)
    return Sequences(
        input_ids=np.concatenate([x.tokens for x in instances]) if instances else empty16,
        segment_ids=segment_ids,
        masked_lm_positions=np.concatenate([x.positions for x in instances]) if instances else empty16,
        masked_lm_ids=np.concatenate([x.labels for x in instances]) if instances else empty16,
        seq_len=seq_len,
        mlm_count=np.fromiter((len(x.positions) for x in instances), dtype=np.int16, count=len(instances)),
        next_sentence_labels=np.fromiter(
            (x.is_random_next for x in instances), dtype=np.int8, count=len(instances)
        ),
    )


def text_file_to_sequences(text: Path, vocab_path: Path, params: PretrainingParams) -> Sequences:
    vocab = load_vocab(vocab_path)
    documents = read_documents(text, BertTokenizer(vocab))
    if not documents:
        raise ValueError(f"{text}: no text (expected one sentence per line, blank lines between documents)")
    return create_instances(documents, vocab, params)


def make_part(task: tuple[Path, Path, Path, PretrainingParams]) -> dict:
    """Worker: one text part -> its sequences file (skipped if already written by an earlier run)."""
    text, vocab_path, out, params = task
    if not out.exists():
        text_file_to_sequences(text, vocab_path, params).save(out)
    lengths = read_lengths(out)
    return {"part": out.name, "sequences": len(lengths), "tokens": int(lengths.sum(dtype=np.int64))}
