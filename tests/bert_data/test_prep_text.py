"""Tokenization, sentence splitting and Wikipedia markup removal."""

import pytest
from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordPiece

from input_preprocessing.bert.sentences import split_sentences
from input_preprocessing.bert.tokenization import MAX_CHARS_PER_WORD, FullTokenizer, load_vocab
from input_preprocessing.bert.wiki import wikitext_to_paragraphs
from tests.bert_data.helpers import VOCAB


@pytest.fixture(scope="module")
def vocab():
    return load_vocab(VOCAB)


def hf_bert_tokenizer(vocab) -> Tokenizer:
    """The `tokenizers` library's BERT WordPiece, uncased, with Google's 200-character word limit."""
    tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=MAX_CHARS_PER_WORD))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


def test_tokenization_matches_tokenizers_library_on_the_wikipedia_sample(vocab, articles):
    lines = [line for article in articles for line in article.split("\n")]
    assert len(lines) > 15_000
    ours = FullTokenizer(vocab)
    hf = hf_bert_tokenizer(vocab)
    expected = [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]
    mismatches = [(line, ours.ids(line), ids) for line, ids in zip(lines, expected) if ours.ids(line) != ids]
    assert not mismatches, mismatches[:3]


@pytest.mark.parametrize(
    "text",
    [
        "Héllo, WORLD! Ünïcödé àccents — and “quotes”.",
        "数据 and 漢字 mixed with text",
        "tab\tnew\nline\x00nul\u200bzero-width\u00adsoft hyphen \ufffd",
        "don't stop: 3.14159, $100, 50%, e-mail@example.com (ok) [x] {y}",
        "x" * 150 + " " + "y" * 250,
        "Ǆemal İstanbul ﬁne Ångström ½",
        "",
    ],
)
def test_tokenization_edge_cases_match_tokenizers_library(vocab, text):
    assert (
        FullTokenizer(vocab).ids(text) == hf_bert_tokenizer(vocab).encode(text, add_special_tokens=False).ids
    )


def test_wordpiece_pieces_and_unknowns(vocab):
    tok = FullTokenizer(vocab)
    assert tok.tokenize("unaffable") == ["una", "##ffa", "##ble"]  # greedy longest match first
    assert tok.tokenize("Hello, world!") == ["hello", ",", "world", "!"]
    assert tok.tokenize("a" * (MAX_CHARS_PER_WORD + 1)) == ["[UNK]"]
    assert tok.tokenize("\u2603") == ["[UNK]"]  # a snowman is not in the vocabulary


def test_load_vocab_keeps_first_id_of_a_repeated_token_and_needs_special_tokens(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nthe\ncat\n")
    assert load_vocab(path) == {
        "[PAD]": 0,
        "[UNK]": 1,
        "[CLS]": 2,
        "[SEP]": 3,
        "[MASK]": 4,
        "the": 5,
        "cat": 6,
    }
    path.write_text("[PAD]\nthe\n")
    with pytest.raises(ValueError, match="vocab.txt has no \\[UNK\\]"):
        load_vocab(path)


@pytest.mark.parametrize(
    ("paragraph", "sentences"),
    [
        ("It rained. Then it stopped.", ["It rained.", "Then it stopped."]),
        ("Dr. Smith met St. John at 5 p.m. yesterday.", ["Dr. Smith met St. John at 5 p.m. yesterday."]),
        (
            "J. R. R. Tolkien wrote books. He died in 1973.",
            ["J. R. R. Tolkien wrote books.", "He died in 1973."],
        ),
        (
            "The U.S. Army left, e.g. in 1990. Why? Because.",
            ["The U.S. Army left, e.g. in 1990.", "Why?", "Because."],
        ),
        ('He said "Stop." She did.', ['He said "Stop."', "She did."]),
        ("Pi is 3.14 roughly. Version 2.0 shipped.", ["Pi is 3.14 roughly.", "Version 2.0 shipped."]),
        ("no end punctuation", ["no end punctuation"]),
    ],
)
def test_split_sentences(paragraph, sentences):
    assert split_sentences(paragraph) == sentences


def test_wikitext_markup_is_removed():
    text = """{{Infobox country|name=X|capital=[[Y]]}}
'''Foo''' is a [[bar (thing)|bar]] in [[Baz]]s.<ref name="a">{{cite web|url=http://x}}</ref>
It has {{lang|de|Wort}} text.
<!-- a comment -->
[[File:Foo.jpg|thumb|A [[caption]] here.]]
{| class="wikitable"
|-
| cell || cell
|}

== History ==
It began in 1900.<ref>Source.</ref> See [http://example.com the site] for more.
* a list item
<math>x^2</math>

== See also ==
* [[Other]]

[[Category:Things]]
[[de:Foo]]
"""
    assert wikitext_to_paragraphs(text) == [
        "Foo is a bar in Bazs. It has text.",
        "History.",
        "It began in 1900. See the site for more.",
    ]
