"""A Wikipedia `pages-articles` XML dump (.xml or .xml.bz2) to plain-text articles: the BERT pipeline's
Wikipedia reader (`input_preprocessing.bert.wiki`), also what the Llama benchmarks' demo data is made of.

A deterministic extraction (WikiExtractor, which MLCommons ran, substitutes the wall-clock date for
`{{CURRENTYEAR}}`, so its output changes from one run to the next): articles (namespace 0, not redirects)
only; comments, references, templates, tables, files, categories, interlanguage links, math and other
non-prose tags removed; links reduced to their text; bold/italic marks, list items and markup leftovers
dropped; section titles kept (as WikiExtractor does) when the section has prose.
"""

import bz2
import contextlib
import html
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

from input_preprocessing.common.runtime import Progress

# The excerpt bundled with BERT's data preparation: the demo data of every benchmark is made from it.
WIKI_SAMPLE = Path(__file__).resolve().parents[1] / "bert" / "sample" / "enwiki_sample.xml.bz2"

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


def extract_articles(dump: Path) -> list[str]:
    """Plain text of every article (paragraphs separated by a newline, like a C4 document)."""
    articles = []
    for _title, wikitext, namespaces in iter_pages(dump):
        text = "\n".join(wikitext_to_paragraphs(wikitext, frozenset(namespaces)))
        if text.strip():
            articles.append(text)
    return articles
