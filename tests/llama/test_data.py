"""Indexed-dataset preparation and reading: round trip, training samples (in NeMo's order for a seed),
validation windows, step layout."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
import torch

from input_preprocessing.common.tokenizer import HFTokenizer
from input_preprocessing.llama31_8b.preprocess import preprocess, read_documents, write_indexed_dataset
from training.llama31_8b import data
from training.llama31_8b.config import LlamaPretrainConfig


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


def test_the_index_cache_is_built_by_one_job_at_a_time(tmp_path, demo_data):
    """While another job holds the cache folder's lock, a build waits; it goes on once the lock is let go."""
    import fcntl
    import threading

    cache = tmp_path / "cache"
    cache.mkdir()
    built = threading.Event()
    prefix = demo_data / "wiki-train_text_document"

    def build():
        data.build_train_dataset(prefix, 64, 200, seed=1, cache_dir=cache, vocab_size=4096)
        built.set()

    with open(cache / ".lock", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        worker = threading.Thread(target=build)
        worker.start()
        assert not built.wait(1.0)  # held: the build has not begun
        assert not any(cache.glob("*.npy"))
    worker.join(60)
    assert built.is_set() and any(cache.glob("*shuffle_index.npy"))


def test_each_step_reads_its_global_batch_once_across_ranks():
    dp, gbs, mbs, steps = 4, 16, 2, 3
    seen = []
    for rank in range(dp):
        seen += [i for batch in data.StepSampler(gbs, mbs, dp, rank, gbs // (mbs * dp), steps) for i in batch]
    assert sorted(seen) == list(range(gbs * steps))
    first_step_rank1 = list(data.StepSampler(gbs, mbs, dp, 1, 2, 1))
    assert first_step_rank1 == [[2, 3], [10, 11]]


def nemo_train_dataset(train, valid, seq_length: int, gbs: int, max_steps: int, seed: int, cache):
    """The training GPTDataset as NeMo 2's PreTrainingDataModule builds it for the MLPerf 8B (AMD's v5.1
    src/train.py and prepare_data.py, NVIDIA's pretrain.py): paths {"train": ["10", train], "validation":
    [valid], "test": [valid]}, the run's seed, and the sample counts of its build(): max_steps x GBS for
    train, (max_steps // val_check_interval + 1) x limit_val_batches x GBS for validation,
    limit_test_batches x GBS for test, with val_check_interval ceil(12288 / GBS) and limit_val_batches
    ceil(1024 / GBS) (AMD's)."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.utils import get_blend_from_list

    val_check_interval, limit_batches = math.ceil(12288 / gbs), math.ceil(1024 / gbs)
    sizes = [
        max_steps * gbs,
        (max_steps // val_check_interval + 1) * limit_batches * gbs,
        limit_batches * gbs,
    ]
    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=seq_length,
        tokenizer=data._TokenIds(4096),  # NeMo passes the HF tokenizer: it names the cache files only
        path_to_cache=str(cache),
        reset_position_ids=False,
        create_attention_mask=True,  # NeMo: `create_attention_mask or not HAVE_TE`
        reset_attention_mask=False,
        eod_mask_loss=False,
        num_dataset_builder_threads=1,
        blend_per_split=[
            get_blend_from_list(["10", str(train)]),
            get_blend_from_list([str(valid)]),
            get_blend_from_list([str(valid)]),
        ],
    )
    built, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()
    return built


def test_the_training_order_of_a_seed_is_nemos(tmp_path):
    """The first 1,000 samples of a seed are those of NeMo's dataset, whatever sample limit the run has:
    the index holds MAX_STEPS x GBS samples (here many epochs of a small file, as 15 epochs of C4 at GBS 32),
    and an index built for the samples a sample limit lets the run train would hold fewer epochs and order
    them otherwise."""
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 4096, int(n)) for n in rng.integers(5, 200, 300)]
    write_indexed_dataset(docs, tmp_path / "train", vocab_size=4096)
    write_indexed_dataset(docs[:40], tmp_path / "valid", vocab_size=4096)
    env = {
        "DATADIR": str(tmp_path),
        "GBS": "2",
        "MBS": "1",
        "MAX_LR": "8e-4",
        "WARMUP_STEPS": "128",
        "SEQ_LENGTH": "64",
        "MAX_SAMPLES_TERMINATION": "491520",
    }
    cfg = LlamaPretrainConfig.from_env(env)
    assert cfg.index_samples() == 1_200_000 * 2 and cfg.max_train_steps() * cfg.gbs == 491_520
    ours = data.build_train_dataset(
        tmp_path / "train", 64, cfg.index_samples(), 1234, tmp_path / "ours", 4096
    )
    nemo = nemo_train_dataset(
        tmp_path / "train", tmp_path / "valid", 64, 2, 1_200_000, 1234, tmp_path / "nemo"
    )
    assert ours.shuffle_index[:1000].tolist() == nemo.shuffle_index[:1000].tolist()
    rows = ours.shuffle_index[:1000]
    assert ours.sample_index[rows].tolist() == nemo.sample_index[rows].tolist()
    docs_at = ours.document_index[ours.sample_index[rows, 0]]
    assert docs_at.tolist() == nemo.document_index[nemo.sample_index[rows, 0]].tolist()
    assert all(torch.equal(ours[i]["tokens"], nemo[i]["tokens"]) for i in range(1000))
    capped = data.build_train_dataset(tmp_path / "train", 64, 491_520, 1234, tmp_path / "capped", 4096)
    assert [capped[i]["tokens"].tolist() for i in range(8)] != [nemo[i]["tokens"].tolist() for i in range(8)]
