"""BERT's uncased tokenizer: the basic tokenizer, then WordPiece, written to match Google's `tokenization.py`
(the one MLCommons' `create_pretraining_data.py` uses) token for token, and fast enough for Wikipedia.

Basic tokenizer, in Google's order: drop NUL, U+FFFD and control characters (Unicode Cc/Cf, except tab,
newline and carriage return, which are whitespace); map whitespace (space, tab, newline, CR, Unicode Zs) to
a space; put spaces around CJK ideographs; split on whitespace; per word: lower-case, strip accents (NFD,
then drop Mn marks), split off every punctuation character (ASCII non-alphanumerics and Unicode P*).
WordPiece: greedy longest-match-first against the vocabulary, `##` on non-initial pieces, `[UNK]` for a
word that cannot be covered or is longer than 200 characters (Google's limit; Hugging Face's is 100).

Speed comes from two caches and no per-character Python on the common path: a `str.translate` table
(filled lazily, one entry per distinct character) does the cleaning and CJK spacing, and the ids of each
distinct word are computed once.
"""

import re
import unicodedata
from pathlib import Path

UNK, CLS, SEP, MASK = "[UNK]", "[CLS]", "[SEP]", "[MASK]"
MAX_CHARS_PER_WORD = 200
_ASCII_PIECES = re.compile(r"[a-z0-9]+|[^a-z0-9]")


def load_vocab(path: Path) -> dict[str, int]:
    """Token -> id, ids in file order; a repeated line keeps its first id (as Google's `load_vocab`)."""
    vocab: dict[str, int] = {}
    with open(path, encoding="utf-8", errors="ignore") as f:
        for line in f:
            token = line.strip()
            if token not in vocab:
                vocab[token] = len(vocab)
    for special in (UNK, CLS, SEP, MASK):
        if special not in vocab:
            raise ValueError(f"vocabulary {path} has no {special} token")
    return vocab


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _is_punctuation(char: str) -> bool:
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


class _CleanTable(dict):
    """`str.translate` table of the basic tokenizer's character clean-up, computed per character on demand."""

    def __missing__(self, cp: int):
        char = chr(cp)
        if char in " \t\n\r":
            out = " "
        elif cp == 0 or cp == 0xFFFD or unicodedata.category(char) in ("Cc", "Cf"):
            out = None
        elif unicodedata.category(char) == "Zs":
            out = " "
        elif _is_cjk(cp):
            out = f" {char} "
        else:
            out = char
        self[cp] = out
        return out


class FullTokenizer:
    """Lower-cased BERT tokenizer: `ids(text)` gives the token ids of one line of text."""

    def __init__(self, vocab: dict[str, int], max_cached_words: int = 2_000_000):
        self.vocab = vocab
        self.unk_id = vocab[UNK]
        self._max_piece_chars = max(len(t) for t in vocab)
        self._clean = _CleanTable()
        self._word_ids: dict[str, tuple[int, ...]] = {}
        self._max_cached_words = max_cached_words

    def basic_tokens(self, text: str) -> list[str]:
        """The basic tokenizer's output (before WordPiece)."""
        out: list[str] = []
        for word in text.translate(self._clean).split():
            out.extend(self._split_word(word))
        return out

    def tokenize(self, text: str) -> list[str]:
        """WordPiece tokens as strings (slow path, for tests and inspection)."""
        inv = {i: t for t, i in self.vocab.items()}
        return [inv[i] for i in self.ids(text)]

    def ids(self, text: str) -> list[int]:
        cache = self._word_ids
        out: list[int] = []
        for word in text.translate(self._clean).split():
            ids = cache.get(word)
            if ids is None:
                ids = tuple(i for piece in self._split_word(word) for i in self._wordpiece(piece))
                if len(cache) >= self._max_cached_words:
                    cache.clear()
                cache[word] = ids
            out.extend(ids)
        return out

    @staticmethod
    def _split_word(word: str) -> list[str]:
        word = word.lower()
        if word.isascii():
            return _ASCII_PIECES.findall(word)
        word = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
        pieces: list[str] = []
        current: list[str] = []
        for char in word:
            if _is_punctuation(char):
                if current:
                    pieces.append("".join(current))
                    current = []
                pieces.append(char)
            else:
                current.append(char)
        if current:
            pieces.append("".join(current))
        # Stripping accents can leave a word made of marks only, and NFD can yield spaces: re-split.
        return [p for piece in pieces for p in piece.split()]

    def _wordpiece(self, word: str) -> list[int]:
        if len(word) > MAX_CHARS_PER_WORD:
            return [self.unk_id]
        vocab, longest = self.vocab, self._max_piece_chars
        ids: list[int] = []
        start, n = 0, len(word)
        while start < n:
            end = min(n, start + longest)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                token_id = vocab.get(piece)
                if token_id is not None:
                    ids.append(token_id)
                    break
                end -= 1
            else:
                return [self.unk_id]
            start = end
        return ids
