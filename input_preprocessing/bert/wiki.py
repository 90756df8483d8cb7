"""A Wikipedia `pages-articles` XML dump (.xml or .xml.bz2) to the text layout of MLCommons' BERT data:
one sentence per line, a blank line between articles, the training articles gathered into
`part-NNNNN-of-MMMMM` files and a held-out set of articles in `eval.txt`.

MLCommons ran WikiExtractor, a sed clean-up and nltk's sentence splitter. This module does the same job with
its own, deterministic extraction (WikiExtractor substitutes the wall-clock date for `{{CURRENTYEAR}}`, so
its output changes from one run to the next): articles (namespace 0, not redirects) only; comments,
references, templates, tables, files, categories, interlanguage links, math and other non-prose tags
removed; links reduced to their text; bold/italic marks, list items and markup leftovers dropped; section
titles kept (as WikiExtractor does) when the section has prose. Paragraphs go through `split_sentences`.
"""

import bz2
import contextlib
import html
import random
import re
import shutil
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from .runtime import Progress, atomic_path, log, write_json_atomic
from .sentences import split_sentences

# Size of a training text part; MLCommons' do_gather.py used 26.92 MB blocks (500 parts of Wikipedia).
PART_BYTES = int(26.92 * 1024 * 1024)
EVAL_SEED = 12345
MAX_EVAL_ARTICLES = 10_000  # MLCommons held out 10,000 articles
PAGES_PER_TASK = 256

_DROP_TAGS = (
    "ref math chem ce gallery timeline imagemap score syntaxhighlight source pre code graph mapframe "
    "references noinclude templatedata hiero inputbox categorytree table"
).split()
_DROP_ELEMENTS = re.compile(
    r"<(" + "|".join(_DROP_TAGS) + r")\b[^>]*?/>|<(" + "|".join(_DROP_TAGS) + r")\b[^>]*>.*?</\2\s*>",
    re.IGNORECASE | re.DOTALL,
)
_COMMENT = re.compile(r"<!--.*?(?:-->|$)", re.DOTALL)
_TEMPLATE = re.compile(r"\{\{(?:[^{}]|\{(?!\{)|\}(?!\}))*\}\}")
_TABLE = re.compile(r"\{\|(?:[^{}]|\{(?!\|)|\}(?<!\|\}))*?\|\}", re.DOTALL)
_INNER_LINK = re.compile(r"\[\[([^\[\]]*)\]\]")
_EXTERNAL_LINK = re.compile(r"\[(?:https?:|ftp:)?//[^\s\]]*\s*([^\]]*)\]")
_BOLD_ITALIC = re.compile(r"'{2,}")
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
_TAG = re.compile(r"</?[a-zA-Z][^<>]*>")
_MAGIC = re.compile(r"__[A-Z]+__")
_HEADING = re.compile(r"^(={1,6})\s*(.*?)\s*\1\s*$")
_EMPTY_PARENS = re.compile(r"\(\s*(?:[,;:]\s*)*\)")
_SPACES = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?])")
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:-[a-z]+)*")
# Namespaces whose links are not prose (the dump's own list, from its siteinfo, is added at run time).
_OTHER_NAMESPACES = frozenset(
    "file image media category template wikipedia project wp help portal user talk special draft module "
    "mediawiki book timedtext commons meta m s wikisource q wikiquote n wikinews b wikibooks v wikiversity "
    "voy species mw d wikidata foundation wmf phab".split()
)
_TEXT_NAMESPACES = frozenset({"w", "wikt", "wiktionary"})  # WikiExtractor keeps these links' text


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def iter_pages(path: Path, progress: Progress | None = None) -> Iterator[tuple[str, str, list[str]]]:
    """Yield (title, wikitext, namespace names) for every article page: namespace 0, not a redirect.
    `progress`, if given, counts MB of the (compressed) file read."""
    namespaces: list[str] = []
    with (
        open(path, "rb") as raw,
        bz2.BZ2File(raw) if path.suffix == ".bz2" else contextlib.nullcontext(raw) as f,
    ):
        context = ET.iterparse(f, events=("start", "end"))
        _, root = next(context)
        for event, elem in context:
            if event != "end":
                continue
            tag = _local(elem.tag)
            if tag == "namespace" and elem.text:
                namespaces.append(elem.text.strip().lower())
            elif tag == "page":
                fields = {_local(child.tag): child for child in elem}
                ns = fields.get("ns")
                revision = fields.get("revision")
                text = None
                if revision is not None:
                    text = next((c.text for c in revision if _local(c.tag) == "text"), None)
                if (ns is None or ns.text == "0") and "redirect" not in fields and text:
                    yield fields["title"].text or "", text, namespaces
                root.clear()
                if progress and raw.tell() >> 20 > progress.done:
                    progress.advance((raw.tell() >> 20) - progress.done)


def _link_text(match: re.Match, namespaces: frozenset[str]) -> str:
    inner = match.group(1)
    target, _, label = inner.partition("|")
    target = target.strip()
    prefix, colon, _ = target.partition(":")
    if colon and prefix and not target.startswith(":"):
        name = prefix.strip().lower()
        if name in _TEXT_NAMESPACES:
            target = target[len(prefix) + 1 :]
        elif name in namespaces or name in _OTHER_NAMESPACES or _LANGUAGE_CODE.fullmatch(prefix.strip()):
            return ""
    if label:
        # [[File:...|thumb|caption]] is gone already; for ordinary links the last field is the text.
        return label.rsplit("|", 1)[-1]
    return target.lstrip(":")


def _remove_nested(pattern: re.Pattern, text: str) -> str:
    """Remove innermost matches of `pattern` until none is left (templates and tables nest)."""
    while True:
        new = pattern.sub("", text)
        if new == text:
            return text
        text = new


def wikitext_to_paragraphs(text: str, namespaces: frozenset[str] = frozenset()) -> list[str]:
    """Plain-text paragraphs (with section titles) of one article's wikitext."""
    text = _COMMENT.sub("", text)
    text = _DROP_ELEMENTS.sub("", text)
    text = _remove_nested(_TEMPLATE, text)
    text = _remove_nested(_TABLE, text)
    # Innermost links first, so that a caption's links are text before its [[File:...]] is dropped.
    while True:
        new = _INNER_LINK.sub(lambda m: _link_text(m, namespaces), text)
        if new == text:
            break
        text = new
    text = _EXTERNAL_LINK.sub(r"\1", text)
    text = _BOLD_ITALIC.sub("", text)
    text = _BR.sub(" ", text)
    text = _TAG.sub("", text)
    text = _MAGIC.sub("", text)
    text = html.unescape(text)

    paragraphs: list[str] = []
    heading: str | None = None
    lines: list[str] = []

    def flush() -> None:
        nonlocal heading
        para = _SPACES.sub(" ", " ".join(lines)).strip()
        para = _SPACE_BEFORE_PUNCT.sub(r"\1", _EMPTY_PARENS.sub("", para)).strip()
        lines.clear()
        if len(para) < 2 or not any(c.isalpha() for c in para):
            return
        if heading:
            paragraphs.append(heading)
            heading = None
        paragraphs.append(para)

    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            flush()
            continue
        m = _HEADING.match(line)
        if m:
            flush()
            title = m.group(2).strip()
            heading = title + "." if title and title[-1] not in ".!?:" else title
            continue
        if line[0] in "*#:;|!{}[]=<" or line.startswith("----"):
            flush()
            continue
        lines.append(line)
    flush()
    return paragraphs


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
