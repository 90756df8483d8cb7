"""The small default's data: the bundled Wikipedia excerpt as a C4-like indexed dataset.

    python -m input_preprocessing.llama31_8b.sample --outputdir /data/llama_demo

Articles are extracted with the BERT pipeline's Wikipedia cleaner (`common/wikitext.py`), written as JSON
lines (`raw/`), a byte-level BPE tokenizer is trained on the training articles with `tokenizers` and saved as
a Hugging Face tokenizer folder (`tokenizer/`), and both splits go through `preprocess` (the same path as
any raw corpus) into `wiki-train_text_document.{bin,idx}` and `wiki-validation_text_document.{bin,idx}`. The
validation split is a seeded random choice of whole articles holding at least --valid-tokens tokens (the
demo evaluates 1,024 sequences of 256 tokens). Not C4: runs on it are demos, never MLPerf results.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from pathlib import Path

from tokenizers import Tokenizer

from input_preprocessing.common.tokenizer import train_tokenizer
from input_preprocessing.common.wikitext import WIKI_SAMPLE, extract_articles
from input_preprocessing.llama31_8b.preprocess import preprocess

TRAIN_PREFIX, VALID_PREFIX = "wiki-train_text_document", "wiki-validation_text_document"
SPLIT_SEED = 1234


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    return path


def split_articles(articles: list[str], lengths: list[int], valid_tokens: int) -> tuple[list[str], list[str]]:
    """(train, validation): validation takes seeded-random whole articles until it holds `valid_tokens`."""
    order = list(range(len(articles)))
    random.Random(SPLIT_SEED).shuffle(order)
    held, total = set(), 0
    for i in order:
        if total >= valid_tokens:
            break
        held.add(i)
        total += lengths[i]
    if total < valid_tokens or len(held) == len(articles):
        raise ValueError(f"the excerpt holds too few tokens for a {valid_tokens}-token validation split")
    train = [a for i, a in enumerate(articles) if i not in held]
    valid = [articles[i] for i in order if i in held]
    return train, valid


def make_sample(
    outputdir: Path, dump: Path = WIKI_SAMPLE, vocab_size: int = 4096, valid_tokens: int = 1024 * 256 + 1
) -> dict:
    start = time.perf_counter()
    if not dump.is_file():
        raise FileNotFoundError(f"{dump}: the Wikipedia excerpt is missing")
    articles = extract_articles(dump)
    tokenizer_dir = outputdir / "tokenizer"
    # A tokenizer trained on every article sizes the split; the real one is then trained on the training
    # articles only, so validation text never shapes the vocabulary. It encodes the held-out articles less
    # tightly, so the split rarely falls short; if it does, hold out a little more.
    probe = train_tokenizer(articles, vocab_size, outputdir / "tmp_tokenizer")
    probe_tok = Tokenizer.from_file(str(probe / "tokenizer.json"))
    lengths = [len(e.ids) + 1 for e in probe_tok.encode_batch(articles, add_special_tokens=False)]
    for path in probe.iterdir():
        path.unlink()
    probe.rmdir()
    for margin in (1.0, 1.05, 1.1, 1.2):
        train, valid = split_articles(articles, lengths, int(valid_tokens * margin))
        train_tokenizer(train, vocab_size, tokenizer_dir)
        stats = {}
        for name, texts, prefix in (("train", train, TRAIN_PREFIX), ("validation", valid, VALID_PREFIX)):
            raw = write_jsonl(outputdir / "raw" / f"wiki-{name}.jsonl.gz", texts)
            stats[name] = preprocess([raw], tokenizer_dir, outputdir / prefix, workers=1)
        if stats["validation"]["tokens"] >= valid_tokens:
            break
    else:
        raise ValueError(
            f"validation split holds {stats['validation']['tokens']} tokens, fewer than {valid_tokens}"
        )
    manifest = {
        "source": str(dump.name),
        "vocab_size": stats["train"]["vocab_size"],
        "eod": stats["train"]["eod"],
        "train": {"prefix": TRAIN_PREFIX, **stats["train"]},
        "validation": {"prefix": VALID_PREFIX, **stats["validation"]},
        "seconds": round(time.perf_counter() - start, 1),
    }
    (outputdir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m input_preprocessing.llama31_8b.sample",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--outputdir", type=Path, required=True)
    parser.add_argument("--wiki", type=Path, default=WIKI_SAMPLE, help="a pages-articles .xml(.bz2) excerpt")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument(
        "--valid-tokens",
        type=int,
        default=1024 * 256 + 1,
        help="validation tokens to hold out (default: 1024 sequences of 256 tokens + 1)",
    )
    args = parser.parse_args(argv)
    try:
        m = make_sample(args.outputdir, args.wiki, args.vocab_size, args.valid_tokens)
    except (OSError, ValueError) as err:
        print(f"sample: error: {err}", file=sys.stderr)
        return 2
    print(
        f"sample: {args.outputdir}: train {m['train']['documents']} articles / "
        f"{m['train']['tokens']} tokens, "
        f"validation {m['validation']['documents']} / {m['validation']['tokens']} tokens, vocabulary "
        f"{m['vocab_size']} (EOD {m['eod']}), {m['seconds']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
