"""The CPU default's data: the bundled Wikipedia excerpt as a summarisation set, in the MLCommons layout.

    python -m input_preprocessing.llama2_70b_lora.prepare --outputdir /data/lora_demo --sample [--seq-len 256]

Articles come from the same reader the Llama 3.1 8B sample uses. Each article's first paragraph is its
summary; the paragraphs after it are cut, at paragraph boundaries, into prompts of at most half a row, and
each prompt becomes one example:

    [BOS] prompt "\\n\\nSummary:" summary [EOS]      loss_mask 1 on `summary [EOS]` only

(the summary capped at a quarter of half a row). Examples are packed greedily, in order, into rows of exactly
`seq_len` tokens; `seq_start_id` lists where each example starts, and the tail after the last one is padding
(the pad token, loss_mask 0) that belongs to the last sequence. `--one-per-row`: one example a row, padded, as
GovReport's rows (`seq_start_id` [0]), so that a GPU trial runs the real set's shape (a dense batch, not
packed sequences: `training/llama2_70b_lora/data.py`). A seeded choice of whole articles is held out
for validation. The tokenizer is any Hugging Face tokenizer folder (`--tokenizer DIR`), by default a
byte-level BPE of 4,096 tokens trained on the training articles; it is copied into `OUTPUTDIR/model/` so the
run needs nothing else, and recorded in `model/meta.json` (size, sha256, sampled blocks) for the preflight.
Not GovReport: runs on it are demos, never MLPerf results.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path

import numpy as np

from input_preprocessing.common.checksums import KEY, file_hash, sampled_sha256
from input_preprocessing.common.runtime import PrepError
from input_preprocessing.common.tokenizer import HFTokenizer, train_tokenizer
from input_preprocessing.common.wikitext import WIKI_SAMPLE, extract_articles
from input_preprocessing.llama2_70b_lora import layout, model

SPLIT_SEED = 1234
SEPARATOR = "\n\nSummary:"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model")
MIN_SEQ_LEN = 64


def split_articles(articles: list[str], valid_fraction: float) -> tuple[list[str], list[str]]:
    """(train, validation): a seeded choice of whole articles (at least one) is held out, order kept."""
    order = list(range(len(articles)))
    random.Random(SPLIT_SEED).shuffle(order)
    held = set(order[: max(1, round(valid_fraction * len(articles)))])
    if len(held) >= len(articles):
        raise PrepError(f"{len(articles)} articles are too few to hold out a validation split")
    return [a for i, a in enumerate(articles) if i not in held], [
        a for i, a in enumerate(articles) if i in held
    ]


def special_id(tok: HFTokenizer, name: str) -> int | None:
    """The id of the tokenizer folder's `bos_token` / `pad_token`, if it names one in the vocabulary."""
    config = tok.path.parent / "tokenizer_config.json"
    value = json.loads(config.read_text()).get(name) if config.is_file() else None
    if isinstance(value, dict):
        value = value.get("content")
    return tok.tokenizer.token_to_id(value) if value else None


def article_examples(
    summary: list[int], paragraphs: list[list[int]], budget: int, bos: list[int], sep: list[int], eos: int
) -> list[tuple[list[int], list[int]]]:
    """(input_ids, loss_mask) of each example of one article, each at most `budget` tokens."""
    summary = summary[: max(1, budget // 4)]
    room = budget - len(bos) - len(sep) - len(summary) - 1
    if room < 1 or not paragraphs:
        return []
    prompts, current = [], []
    for para in paragraphs:
        if len(current) + len(para) > room and current:
            prompts.append(current)
            current = []
        current = current + para[: room - len(current)]
    if current:
        prompts.append(current)
    target = summary + [eos]
    return [
        (bos + prompt + sep + target, [0] * (len(bos) + len(prompt) + len(sep)) + [1] * len(target))
        for prompt in prompts
    ]


def pack(
    examples: list[tuple[list[int], list[int]]], seq_len: int, pad: int, one_per_row: bool = False
) -> list[dict]:
    """Rows of exactly `seq_len` tokens, examples placed greedily in order (`one_per_row`: one a row)."""
    placed: list[list[tuple[list[int], list[int]]]] = []
    used = seq_len
    for example in examples:
        if len(example[0]) > seq_len:
            raise PrepError(f"an example of {len(example[0])} tokens does not fit a row of {seq_len}")
        if used + len(example[0]) > seq_len or one_per_row:
            placed.append([])
            used = 0
        placed[-1].append(example)
        used += len(example[0])
    tokens = np.full((len(placed), seq_len), pad, dtype=layout.TOKEN_DTYPE)
    rows = []
    for r, row in enumerate(placed):
        mask = np.zeros(seq_len, dtype=np.uint8)
        starts, at = [], 0
        for ids, loss in row:
            tokens[r, at : at + len(ids)] = ids
            mask[at : at + len(ids)] = loss
            starts.append(at)
            at += len(ids)
        rows.append(layout.make_row(tokens[r], mask, starts))
    return rows


def encode_articles(tok: HFTokenizer, articles: list[str]) -> list[tuple[list[int], list[list[int]]]]:
    """(summary ids, body paragraph ids) of each article with a summary and a body."""
    out = []
    for text in articles:
        paragraphs = [p for p in text.split("\n") if p.strip()]
        if len(paragraphs) < 2:
            continue
        ids = tok.encode_batch([" " + paragraphs[0]] + [p + "\n" for p in paragraphs[1:]])
        out.append((ids[0], ids[1:]))
    return out


def install_tokenizer(source: Path | None, model_dir: Path, train_texts: list[str], vocab_size: int) -> str:
    """Put the tokenizer into `model_dir`; returns how it was made, for meta.json."""
    model_dir.mkdir(parents=True, exist_ok=True)
    if source is None:
        train_tokenizer(train_texts, vocab_size, model_dir)
        return f"byte-level BPE ({vocab_size} tokens) trained on the excerpt's training articles"
    if not (source / "tokenizer.json").is_file():
        raise PrepError(f"--tokenizer {source}: no tokenizer.json (a Hugging Face 'fast' tokenizer folder)")
    if source.resolve() != model_dir.resolve():
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copyfile(source / name, model_dir / name)
    return str(source)


def make_sample(
    outputdir: Path,
    tokenizer: Path | None = None,
    seq_len: int = 8192,
    wiki: Path = WIKI_SAMPLE,
    vocab_size: int = 4096,
    valid_fraction: float = 0.05,
    one_per_row: bool = False,
) -> dict:
    """Write OUTPUTDIR/data/{train,validation}.npy + meta.json and the tokenizer into OUTPUTDIR/model."""
    start = time.perf_counter()
    if seq_len < MIN_SEQ_LEN:
        raise PrepError(f"--seq-len {seq_len}: at least {MIN_SEQ_LEN} tokens are needed")
    if not wiki.is_file():
        raise PrepError(f"{wiki}: the Wikipedia excerpt is missing")
    train_articles, valid_articles = split_articles(extract_articles(wiki), valid_fraction)
    data_dir, model_dir = outputdir / "data", outputdir / "model"
    made_by = install_tokenizer(tokenizer, model_dir, train_articles, vocab_size)
    written = [name for name in TOKENIZER_FILES if (model_dir / name).is_file()]
    model.record_written(model_dir, written, model.SAMPLE_SOURCE)  # checked by the preflight as data is
    tok = HFTokenizer(model_dir)
    bos, pad = special_id(tok, "bos_token"), special_id(tok, "pad_token")
    bos_ids, sep = ([bos] if bos is not None else []), tok.encode_batch([SEPARATOR])[0]
    pad = tok.eod if pad is None else pad
    meta = {
        "kind": "sample",
        "source": f"{wiki.name} (bundled Wikipedia excerpt; not GovReport: demo runs only)",
        "tokenizer": made_by,
        "vocab_size": tok.vocab_size,
        "seq_length": seq_len,
        "one_per_row": one_per_row,
        "bos_id": bos,
        "eos_id": tok.eod,
        "pad_id": pad,
        "splits": {},
    }
    for split, articles in (("train", train_articles), ("validation", valid_articles)):
        examples = [
            ex
            for summary, body in encode_articles(tok, articles)
            for ex in article_examples(summary, body, seq_len // 2, bos_ids, sep, tok.eod)
        ]
        rows = pack(examples, seq_len, pad, one_per_row)
        path = data_dir / f"{split}.npy"
        size = layout.save_rows(path, rows)
        meta["splits"][split] = {
            "file": path.name,
            "rows": len(rows),
            "sequences": len(examples),
            "articles": len(articles),
            "target_tokens": int(sum(sum(row["loss_mask"]) for row in rows)),
            "size": size,
            "md5": file_hash(path),
            KEY: sampled_sha256(path),
        }
    meta["seconds"] = round(time.perf_counter() - start, 1)
    layout.write_meta(data_dir, meta)
    return meta
