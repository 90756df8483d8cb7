"""BERT's uncased tokenizer as MLCommons made its data with it (Google's `tokenization.py` with
`do_lower_case`, called by `create_pretraining_data.py`), on Hugging Face `tokenizers`: `BertNormalizer`
(clean-up, spaces around CJK ideographs, accents stripped, lower case), `BertPreTokenizer` (whitespace and
punctuation) and `WordPiece` with Google's 200-character word limit (`tokenizers` defaults to 100).

`tokenizers` follows Google's rules except in three places, for which `BertTokenizer` rewrites a line that has
such a character (checked token for token against MLCommons' `tokenization.py` on every code point):
- Lower case: Google calls Python's `str.lower()`, which gives a word-final capital sigma as 'ς' (Unicode's
  Final_Sigma rule: "ΟΔΟΣ" -> ο ##δ ##ος); `tokenizers` lower-cases per character ('σ': ο ##δ ##ο ##σ).
  Every line is lower-cased with `str.lower()` first (after Google's clean-up where it has a capital sigma,
  since the rule looks at the neighbouring letters); `tokenizers`' own lower-casing then changes nothing.
- Private-use characters: Google keeps them (a word with one becomes [UNK]); `BertNormalizer` deletes them.
  They become U+FFFC, which both keep and which no vocabulary token may contain.
- CJK ideographs: `tokenizers` does not split off part of U+2B820-U+2CEAF, which Google's ranges include.
The Unicode tables differ too: MLCommons' data was made with Python 3.7 (Unicode 11), while `tokenizers` 0.23
does not know the marks and punctuation encoded from Unicode 10 on, so those of Unicode 10 and 11 are not
stripped or split here (later ones were unassigned for the reference too); none occurs in the bundled excerpt.

Speed: `tokenizers` takes about 2 us per token here, where Google's algorithm in Python with a cache of each
distinct word's ids took 0.8 us. `BertTokenizer` keeps such a cache (a space is a word boundary for every
step, so the ids of each space-separated word can be looked up alone) and skips the normalizer for printable
ASCII words in lower case (it changes nothing there): as fast as the Python implementation it replaces.
"""

import re
from pathlib import Path

from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordPiece

UNK, CLS, SEP, MASK = "[UNK]", "[CLS]", "[SEP]", "[MASK]"
MAX_CHARS_PER_WORD = 200  # Google's `WordpieceTokenizer`; longer words become [UNK]
_PRIVATE_USE = "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"
_STAND_IN = "\ufffc"  # for private-use characters: kept by both, in no vocabulary token
_CJK_EXTENSION_E = "\U0002b820-\U0002ceaf"  # in Google's `_is_chinese_char` ranges, partly not in tokenizers'
_PRIVATE_USE_RE = re.compile(f"[{_PRIVATE_USE}]")
_CJK_EXTENSION_E_RE = re.compile(f"[{_CJK_EXTENSION_E}]")
_DIFFERENT_RE = re.compile(f"[Σ{_PRIVATE_USE}{_CJK_EXTENSION_E}]")


def load_vocab(path: Path) -> dict[str, int]:
    """Token -> id, ids in file order; a repeated line keeps its first id (as Google's `load_vocab`;
    `tokenizers`' `WordPiece.read_file` keeps the last)."""
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


def bert_wordpiece(vocab: dict[str, int]) -> Tokenizer:
    """The `tokenizers` pipeline of an uncased BERT tokenizer, with Google's word limit."""
    tokenizer = Tokenizer(WordPiece(vocab, unk_token=UNK, max_input_chars_per_word=MAX_CHARS_PER_WORD))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


class BertTokenizer:
    """`ids(line)`: the token ids of one line of text, as Google's `FullTokenizer(do_lower_case=True)`."""

    def __init__(self, vocab: dict[str, int], max_cached_words: int = 2_000_000):
        if any(_PRIVATE_USE_RE.search(token) or _STAND_IN in token for token in vocab):
            raise ValueError("the vocabulary has private-use characters or U+FFFC (their stand-in here)")
        self.tokenizer = bert_wordpiece(vocab)
        # For a printable ASCII word in lower case the normalizer changes nothing: skip it (1.7x faster).
        self._ascii_tokenizer = Tokenizer(self.tokenizer.model)
        self._ascii_tokenizer.pre_tokenizer = self.tokenizer.pre_tokenizer
        self._clean = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False
        )
        self._word_ids: dict[str, tuple[int, ...]] = {}
        self._max_cached_words = max_cached_words

    def ids(self, line: str) -> list[int]:
        if not line.isascii() and _DIFFERENT_RE.search(line):
            line = self._as_google_sees_it(line)
        cache = self._word_ids
        out: list[int] = []
        for word in line.lower().split(" "):
            ids = cache.get(word)
            if ids is None:
                plain_ascii = word.isascii() and word.isprintable()
                tokenizer = self._ascii_tokenizer if plain_ascii else self.tokenizer
                ids = tuple(tokenizer.encode(word, add_special_tokens=False).ids)
                if len(cache) >= self._max_cached_words:
                    cache.clear()
                cache[word] = ids
            out.extend(ids)
        return out

    def tokenize(self, line: str) -> list[str]:
        """The tokens as strings (for tests and inspection)."""
        return [self.tokenizer.id_to_token(i) for i in self.ids(line)]

    def _as_google_sees_it(self, line: str) -> str:
        """The line rewritten so that `tokenizers` gives Google's tokens for it (see the module's doc)."""
        line = _PRIVATE_USE_RE.sub(_STAND_IN, line)
        line = _CJK_EXTENSION_E_RE.sub(r" \g<0> ", line)
        if "Σ" in line:  # Final_Sigma looks at the neighbours Google's str.lower() saw: after its clean-up
            line = self._clean.normalize_str(line)
        return line
