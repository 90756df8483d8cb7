"""Indexed-dataset preparation and reading: round trip, training samples, validation windows, step layout."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from input_preprocessing.common.tokenizer import HFTokenizer
from input_preprocessing.llama31_8b.preprocess import preprocess, read_documents, write_indexed_dataset
from training.llama31_8b import data


def test_preprocess_round_trip(tmp_path, demo_data):
    """JSON lines and plain text through any HF tokenizer folder -> .bin/.idx -> the same token ids back."""
    docs = ["The quick brown fox.\nJumps over the lazy dog.", "Café, naïve — ünïcode", "x" * 500]
    jsonl = tmp_path / "docs.jsonl.gz"
    with gzip.open(jsonl, "wt") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
    txt = tmp_path / "more.txt"
    txt.write_text("First block\nline two\n\nSecond block\n")
    tok = HFTokenizer(demo_data / "tokenizer")
    stats = preprocess([jsonl, txt], demo_data / "tokenizer", tmp_path / "out_text_document", workers=2)
    texts = list(read_documents(jsonl)) + list(read_documents(txt))
    assert texts[3:] == ["First block\nline two", "Second block"]
    expected = [ids + [tok.eod] for ids in tok.encode_batch(texts)]
    dataset = data.open_indexed(tmp_path / "out_text_document")
    assert len(dataset) == stats["documents"] == 5
    assert [dataset[i].tolist() for i in range(5)] == expected
    assert dataset[0].dtype == np.uint16  # megatron's choice for a 4096-token vocabulary
    assert tok.tokenizer.decode(expected[1][:-1]) == docs[1]


def test_int32_tokens_for_a_large_vocabulary(tmp_path):
    docs = [np.array([128000, 5, 128001]), np.array([7, 8])]
    write_indexed_dataset(docs, tmp_path / "big", vocab_size=128256)
    dataset = data.open_indexed(tmp_path / "big")
    assert dataset[0].dtype == np.int32 and dataset[0].tolist() == [128000, 5, 128001]


def test_missing_and_short_files_are_named(tmp_path, demo_data):
    with pytest.raises(data.DataError, match="nothing_here.bin"):
        data.open_indexed(tmp_path / "nothing_here")
    with pytest.raises(data.DataError, match="fewer than"):
        data.load_validation(demo_data / "wiki-validation_text_document", 100_000, 64, 4096)
    with pytest.raises(data.DataError, match="vocabulary of 100"):
        data.load_validation(demo_data / "wiki-validation_text_document", 8, 64, 100)


def test_validation_is_the_first_sequences_unshuffled(demo_data):
    prefix = demo_data / "wiki-validation_text_document"
    windows = data.load_validation(prefix, 16, 64, 4096)
    dataset = data.open_indexed(prefix)
    stream = np.concatenate([dataset[i] for i in range(len(dataset))])
    assert windows.shape == (16, 65)
    for i in range(16):
        assert windows[i].tolist() == stream[i * 64 : i * 64 + 65].tolist()


def test_training_samples_are_shuffled_by_the_seed(tmp_path, demo_data):
    prefix = demo_data / "wiki-train_text_document"
    a = data.build_train_dataset(prefix, 64, 200, seed=1, cache_dir=tmp_path / "cache", vocab_size=4096)
    a_again = data.build_train_dataset(prefix, 64, 200, seed=1, cache_dir=tmp_path / "cache", vocab_size=4096)
    b = data.build_train_dataset(prefix, 64, 200, seed=2, cache_dir=tmp_path / "cache", vocab_size=4096)
    assert any((tmp_path / "cache").glob("*shuffle_index.npy"))  # the cache folder holds the index
    first = [a[i]["tokens"].tolist() for i in range(8)]
    assert first == [a_again[i]["tokens"].tolist() for i in range(8)]
    assert first != [b[i]["tokens"].tolist() for i in range(8)]
    sample = a[0]
    assert sample["tokens"].shape == (64,) and sample["labels"][:-1].tolist() == sample["tokens"][1:].tolist()


def test_each_step_reads_its_global_batch_once_across_ranks():
    dp, gbs, mbs, steps = 4, 16, 2, 3
    seen = []
    for rank in range(dp):
        seen += [i for batch in data.StepSampler(gbs, mbs, dp, rank, gbs // (mbs * dp), steps) for i in batch]
    assert sorted(seen) == list(range(gbs * steps))
    first_step_rank1 = list(data.StepSampler(gbs, mbs, dp, 1, 2, 1))
    assert first_step_rank1 == [[2, 3], [10, 11]]
