"""--sample: the bundled excerpt as packed summarisation rows (loss only on each summary and its EOS,
seq_start_id where each example starts, rows of exactly seq_len tokens), meta.json, and the tokenizer in
model/ (trained by default, or any Hugging Face tokenizer folder)."""

from __future__ import annotations

import numpy as np
import pytest

from input_preprocessing.common.checksums import file_hash
from input_preprocessing.common.runtime import PrepError
from input_preprocessing.common.wikitext import WIKI_SAMPLE, extract_articles
from input_preprocessing.llama2_70b_lora import layout, model, prepare, sample, verify

SEQ = 128


@pytest.fixture(scope="session")
def articles() -> list[str]:
    return extract_articles(WIKI_SAMPLE)


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory, articles):
    out = tmp_path_factory.mktemp("lora_sample")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sample, "extract_articles", lambda _: articles)  # read the excerpt once for all tests
        sample.make_sample(out, seq_len=SEQ)
    return out


def segments(row: dict):
    """(input_ids, loss_mask) of each packed sequence of a row (the last one with the row's padding)."""
    ids, mask = np.asarray(row["input_ids"]), np.asarray(row["loss_mask"])
    bounds = [*row["seq_start_id"], len(ids)]
    return [(ids[a:b], mask[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]


def test_rows_are_packed_examples_with_the_loss_on_the_summary(sample_dir):
    meta = layout.read_meta(sample_dir / "data")
    assert meta["kind"] == "sample" and meta["seq_length"] == SEQ and meta["vocab_size"] == 4096
    assert verify.verify(sample_dir, full=True) == []
    eos, pad, bos = meta["eos_id"], meta["pad_id"], meta["bos_id"]
    for split, spec in meta["splits"].items():
        rows = layout.load_rows(sample_dir / "data" / f"{split}.npy")
        assert max(len(r["seq_start_id"]) for r in rows) >= 2  # packing puts several examples in a row
        assert len(rows) == spec["rows"] and sum(len(r["seq_start_id"]) for r in rows) == spec["sequences"]
        assert sum(sum(r["loss_mask"]) for r in rows) == spec["target_tokens"] > 0
        for row in rows:
            assert row["input_ids"].dtype == np.int32 and len(row["input_ids"]) == SEQ
            for ids, mask in segments(row):
                ones = np.flatnonzero(mask)
                end = ones[-1] + 1  # the example ends with its EOS; padding (loss 0) may follow
                assert ids[0] == bos and ids[end - 1] == eos and end <= SEQ // 2
                assert (np.diff(ones) == 1).all() and mask[0] == 0  # one run of targets after the prompt
                assert (ids[end:] == pad).all() and not mask[end:].any()


def test_meta_and_tokenizer(sample_dir):
    meta = layout.read_meta(sample_dir / "data")
    assert meta["splits"]["train"]["articles"] > 10 * meta["splits"]["validation"]["articles"] > 0
    assert "trained on the excerpt" in meta["tokenizer"] and "not GovReport" in meta["source"]
    assert (sample_dir / "model" / "tokenizer.json").is_file()
    recorded = model.read_meta(sample_dir / "model")  # checked by the preflight as the data is
    assert recorded["source"] == model.SAMPLE_SOURCE
    assert set(recorded["files"]) == {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    tokenizer = sample_dir / "model" / "tokenizer.json"
    assert recorded["files"]["tokenizer.json"]["sha256"] == file_hash(tokenizer, "sha256")
    assert not (
        sample_dir / "model" / "config.json"
    ).exists()  # the CPU default's model is built by the trainer


def test_any_tokenizer_folder_through_the_command(sample_dir, articles, tmp_path, monkeypatch):
    monkeypatch.setattr(sample, "extract_articles", lambda _: articles)
    out = tmp_path / "out"
    argv = ["--outputdir", str(out), "--sample", "--seq-len", "64", "--tokenizer", str(sample_dir / "model")]
    assert prepare.main(argv) == 0
    assert (out / "model" / "tokenizer.json").read_bytes() == (
        sample_dir / "model" / "tokenizer.json"
    ).read_bytes()
    meta = layout.read_meta(out / "data")
    assert meta["seq_length"] == 64 and meta["tokenizer"] == str(sample_dir / "model")
    with pytest.raises(PrepError, match="no tokenizer.json"):
        sample.make_sample(tmp_path / "bad", tokenizer=tmp_path, seq_len=64)


def test_examples_fit_half_a_row_and_cut_at_paragraphs():
    summary, paragraphs = [7] * 10, [[1] * 5, [2] * 5, [3] * 30]
    examples = sample.article_examples(summary, paragraphs, budget=24, bos=[0], sep=[9], eos=8)
    # summary capped at 24 // 4 = 6 tokens; room for the prompt: 24 - 1 - 1 - 6 - 1 = 15
    assert [ids for ids, _ in examples] == [
        [0, *[1] * 5, *[2] * 5, 9, *[7] * 6, 8],
        [0, *[3] * 15, 9, *[7] * 6, 8],
    ]
    assert examples[0][1] == [0] * 12 + [1] * 7


def test_packing_is_greedy_in_order_and_pads():
    examples = [([5] * 3, [0, 1, 1]), ([6] * 4, [0, 0, 1, 1]), ([7] * 2, [0, 1])]
    rows = sample.pack(examples, seq_len=6, pad=0)
    assert [r["seq_start_id"] for r in rows] == [[0], [0, 4]]
    assert rows[0]["input_ids"].tolist() == [5, 5, 5, 0, 0, 0] and rows[0]["loss_mask"] == [0, 1, 1, 0, 0, 0]
    assert rows[1]["input_ids"].tolist() == [6, 6, 6, 6, 7, 7] and rows[1]["loss_mask"] == [0, 0, 1, 1, 0, 1]
    with pytest.raises(PrepError, match="does not fit a row of 6"):
        sample.pack([([1] * 7, [1] * 7)], seq_len=6, pad=0)
    alone = sample.pack(examples, seq_len=6, pad=0, one_per_row=True)  # GovReport's layout
    assert [r["seq_start_id"] for r in alone] == [[0], [0], [0]]
    assert alone[2]["input_ids"].tolist() == [7, 7, 0, 0, 0, 0]
    assert alone[2]["loss_mask"] == [0, 1, 0, 0, 0, 0]


def test_the_split_is_seeded_and_whole_articles():
    articles = [f"a{i}" for i in range(40)]
    train, valid = sample.split_articles(articles, 0.05)
    assert len(valid) == 2 and sorted(train + valid) == sorted(articles)
    assert sample.split_articles(articles, 0.05) == (train, valid)
