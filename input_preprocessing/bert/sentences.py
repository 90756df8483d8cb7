"""A small rule-based English sentence splitter for Wikipedia prose.

MLCommons split sentences with nltk's punkt model, whose data cannot be fetched here; this splitter keeps to
the same idea with explicit rules: a sentence ends at `.`, `!` or `?` (plus closing quotes or brackets) when
whitespace and a capital letter, digit or opening quote follow, unless the word before the full stop is a
known abbreviation ("Dr.", "St.", "e.g."), a single letter (an initial, "J. R. R. Tolkien") or a dotted
acronym ("U.S.").
"""

import re

ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr prof sr jr st mt ft rev fr hon gen col lt sgt capt cmdr adm maj brig gov sen rep pres
    messrs mme mlle sra sta no nos vs etc al cf ca approx est fig figs vol vols ed eds pp op cit ibid
    inc ltd co corp bros assn dept univ jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu
    fri sat sun ave blvd rd hwy b.c a.d u.s u.k e.g i.e a.m p.m ph.d b.a m.a b.sc m.sc
    """.split()
)

_BOUNDARY = re.compile(r"([.!?]+)([\"'\u201d\u2019)\]]*)\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9\u00c0-\u00de])")
_INITIALS = re.compile(r"(?:[a-z]\.)*[a-z]")


def _is_abbreviation(text: str, dot: int) -> bool:
    """Whether the full stop at `text[dot]` ends an abbreviation or an initial rather than a sentence."""
    start = text.rfind(" ", 0, dot) + 1
    word = text[start:dot].lstrip("\"'([\u201c\u2018").lower()
    return word in ABBREVIATIONS or bool(_INITIALS.fullmatch(word))


def split_sentences(paragraph: str) -> list[str]:
    sentences: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(paragraph):
        if m.group(1) == "." and _is_abbreviation(paragraph, m.start(1)):
            continue
        sentence = paragraph[start : m.end(2)].strip()
        if sentence:
            sentences.append(sentence)
        start = m.end()
    tail = paragraph[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences
