"""A Wikipedia `pages-articles` XML dump (.xml or .xml.bz2) to the text layout of MLCommons' BERT data:
one sentence per line, a blank line between articles, the training articles gathered into
`part-NNNNN-of-MMMMM` files and a held-out set of articles in `eval.txt`.

MLCommons ran WikiExtractor, a sed clean-up and nltk's sentence splitter. This module does the same job with
a deterministic extraction of its own (`input_preprocessing.common.wikitext`, which the Llama benchmarks'
demo data reads too); paragraphs go through `split_sentences`.
"""

import contextlib
import random
import shutil
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from input_preprocessing.common.runtime import Progress, log, write_json_atomic
from input_preprocessing.common.wikitext import iter_pages, wikitext_to_paragraphs
from training.common.files import atomic_path

from .sentences import split_sentences

# Size of a training text part; MLCommons' do_gather.py used 26.92 MB blocks (500 parts of Wikipedia).
PART_BYTES = int(26.92 * 1024 * 1024)
EVAL_SEED = 12345
MAX_EVAL_ARTICLES = 10_000  # MLCommons held out 10,000 articles
PAGES_PER_TASK = 256


def article_text(wikitext: str, namespaces: frozenset[str]) -> str:
    """One article as MLCommons' text format: a sentence per line (no trailing blank line)."""
    sentences = [s for para in wikitext_to_paragraphs(wikitext, namespaces) for s in split_sentences(para)]
    return "\n".join(sentences)


def _extract_batch(batch: tuple[list[str], list[str]]) -> list[str]:
    namespaces, texts = batch
    ns = frozenset(namespaces)
    return [article_text(t, ns) for t in texts]


def _batches(dump: Path) -> Iterator[tuple[list[str], list[str]]]:
    texts: list[str] = []
    namespaces: list[str] = []
    progress = Progress("wiki-extract", max(1, dump.stat().st_size >> 20), "MB")
    for _title, text, namespaces in iter_pages(dump, progress):
        texts.append(text)
        if len(texts) == PAGES_PER_TASK:
            yield namespaces, texts
            texts = []
    if texts:
        yield namespaces, texts
    if progress.done < progress.total:  # the XML can end before the file's last MB is counted
        progress.advance(progress.total - progress.done)


def _extracted(dump: Path, jobs: int) -> Iterator[list[str]]:
    """Cleaned articles, batch by batch in dump order; the XML is parsed here, the text cleaned by workers."""
    if jobs <= 1:
        yield from map(_extract_batch, _batches(dump))
        return
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        window: deque[Future] = deque()
        for batch in _batches(dump):
            window.append(pool.submit(_extract_batch, batch))
            if len(window) >= 4 * jobs:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def extract_articles(dump: Path, out: Path, jobs: int) -> int:
    """Pass 1: every non-empty article of the dump, in dump order, into `out` (blank line between)."""
    count = 0
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for articles in _extracted(dump, jobs):
            for article in articles:
                if article:
                    f.write(article + "\n\n")
                    count += 1
    log(f"[wiki] extracted {count} articles from {dump}")
    return count


def _read_articles(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        lines: list[str] = []
        for line in f:
            line = line.rstrip("\n")
            if line:
                lines.append(line)
            elif lines:
                yield "\n".join(lines)
                lines = []
        if lines:
            yield "\n".join(lines)


def split_text(articles: Path, text_dir: Path, eval_articles: int | None) -> dict:
    """Pass 2: hold out eval articles (chosen with seed 12345) into eval.txt, gather the rest into parts of
    about 27 MB (balanced by size), written to a temporary folder that is renamed to `text_dir` at the end."""
    sizes = [len(a.encode()) + 2 for a in _read_articles(articles)]
    total = len(sizes)
    if total < 2:
        raise ValueError(f"{articles}: only {total} article(s); need at least 2 (one for eval, one to train)")
    n_eval = eval_articles if eval_articles is not None else min(MAX_EVAL_ARTICLES, max(1, round(total / 10)))
    if not 1 <= n_eval < total:
        raise ValueError(f"--eval-articles {n_eval}: must be between 1 and {total - 1} for this dump")
    eval_ids = set(random.Random(EVAL_SEED).sample(range(total), n_eval))
    train_bytes = sum(size for i, size in enumerate(sizes) if i not in eval_ids)
    n_parts = min(total - n_eval, max(1, -(-train_bytes // PART_BYTES)))

    tmp_dir = text_dir.with_name(text_dir.name + ".tmp")
    if tmp_dir.exists():
        shutil.rmtree(tmp_dir)
    tmp_dir.mkdir(parents=True)
    progress = Progress("wiki-split", total, "articles")
    seen = 0
    with contextlib.ExitStack() as stack:
        ev = stack.enter_context(open(tmp_dir / "eval.txt", "w", encoding="utf-8"))
        parts = [
            stack.enter_context(open(tmp_dir / f"part-{k:05d}-of-{n_parts:05d}", "w", encoding="utf-8"))
            for k in range(n_parts)
        ]
        for i, article in enumerate(_read_articles(articles)):
            if i in eval_ids:
                ev.write(article + "\n\n")
            else:
                parts[min(n_parts - 1, seen * n_parts // train_bytes)].write(article + "\n\n")
                seen += sizes[i]
            progress.advance()
    stats = {"articles": total, "eval_articles": n_eval, "train_parts": n_parts}
    write_json_atomic(tmp_dir / "split.json", stats)
    if text_dir.exists():
        shutil.rmtree(text_dir)
    tmp_dir.rename(text_dir)
    return stats


def wiki_to_text(dump: Path, work: Path, text_dir: Path, eval_articles: int | None, jobs: int) -> dict:
    """The whole conversion: `dump` -> `text_dir/{part-*,eval.txt}`, with `work/articles.txt` in between."""
    if not dump.is_file():
        raise FileNotFoundError(f"--wiki-dump {dump}: no such file")
    articles = work / "articles.txt"
    extract_articles(dump, articles, jobs)
    return split_text(articles, text_dir, eval_articles)
