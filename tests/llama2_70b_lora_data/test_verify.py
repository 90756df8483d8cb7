"""verify: a prepared folder passes; a truncated file, a wrong row count, a bad row, a missing or cut-off
shard, a wrong model shape and a changed byte (--full) are each named; exit status 1 on the command line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from input_preprocessing.common.checksums import KEY, file_hash, sampled_sha256
from input_preprocessing.llama2_70b_lora import layout, verify
from tests.llama2_70b_lora_data.conftest import word_tokenizer, write_fake_model

SEQ, VOCAB = 8, 50


def good_rows(n: int) -> list[dict]:
    tokens = (np.arange(n * SEQ) % VOCAB).astype(np.int32).reshape(n, SEQ)
    return [layout.make_row(tokens[i], [0, 0, 1, 1, 0, 1, 1, 0], [0, 4]) for i in range(n)]


def write_split(folder, split, rows, meta) -> None:
    path = folder / "data" / f"{split}.npy"
    size = layout.save_rows(path, rows)
    meta["splits"][split] = {
        "file": path.name,
        "rows": len(rows),
        "size": size,
        "md5": file_hash(path),
        KEY: sampled_sha256(path),
    }  # as data preparation records it
    layout.write_meta(folder / "data", meta)


@pytest.fixture
def sample_dir(tmp_path):
    """A small prepared --sample folder: 4 + 2 rows of 8 tokens, a 50-token tokenizer."""
    meta = {"kind": "sample", "vocab_size": VOCAB, "seq_length": SEQ, "splits": {}}
    for split, n in (("train", 4), ("validation", 2)):
        write_split(tmp_path, split, good_rows(n), meta)
    word_tokenizer(tmp_path / "model", VOCAB)
    return tmp_path


def set_meta(folder, **changes) -> None:
    meta = layout.read_meta(folder / "data")
    for key, value in changes.items():
        split, field = key.split("__")
        meta["splits"][split][field] = value
    (folder / "data" / layout.META).write_text(json.dumps(meta))


def test_a_good_folder_passes_fast_and_full(sample_dir, capsys):
    assert verify.verify(sample_dir) == [] and verify.verify(sample_dir, full=True) == []
    assert verify.main([str(sample_dir), "--preflight"]) == 0
    assert "OK (fast check)" in capsys.readouterr().out


def test_a_truncated_file_is_caught(sample_dir, capsys):
    path = sample_dir / "data" / "train.npy"
    path.write_bytes(path.read_bytes()[:-40])
    assert verify.verify(sample_dir) == [
        f"{path}: {path.stat().st_size:,} bytes, expected "
        f"{path.stat().st_size + 40:,} (truncated or modified)"
    ]
    assert verify.main([str(sample_dir), "--preflight"]) == 1
    assert "truncated" in capsys.readouterr().err
    set_meta(sample_dir, train__size=None, train__sampled_sha256=None)  # unrecorded: unpickling catches it
    (problem,) = verify.verify(sample_dir)
    assert problem.startswith(f"{path}: unreadable, truncated or corrupt")


def test_a_wrong_row_count_is_named(sample_dir):
    set_meta(sample_dir, validation__rows=173)
    (problem,) = verify.verify(sample_dir)
    assert "validation.npy: object array of shape (2,), expected 173 rows" in problem


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"loss_mask": [0, 2, 1, 1, 0, 1, 1, 0]}, "row 1: loss_mask holds values other than 0 and 1: [2]"),
        ({"seq_start_id": [0, 9]}, "row 1: seq_start_id [0, 9] is not increasing from 0 inside the row"),
        ({"seq_start_id": [3, 1]}, "row 1: seq_start_id [3, 1] is not increasing from 0 inside the row"),
        ({"input_ids": np.full(SEQ, VOCAB, np.int32)}, "row 1: input_ids outside the vocabulary [0, 50)"),
        ({"input_ids": np.zeros(SEQ + 1, np.int32)}, "row 1: input_ids has shape (9,), expected (8,)"),
        ({"extra": 1}, "row 1: keys ['extra', 'input_ids', 'loss_mask', 'seq_start_id']"),
    ],
)
def test_a_bad_row_is_named(sample_dir, change, message):
    rows = good_rows(4)
    rows[1] = {**rows[1], **change}
    write_split(sample_dir, "train", rows, layout.read_meta(sample_dir / "data"))
    problems = verify.verify(sample_dir)
    assert len(problems) == 1 and message in problems[0], problems


def test_many_bad_rows_are_counted_and_no_targets_is_a_problem(sample_dir):
    rows = [{**r, "loss_mask": [3] * SEQ} for r in good_rows(8)]
    write_split(sample_dir, "train", rows, layout.read_meta(sample_dir / "data"))
    problems = verify.verify(sample_dir)
    assert len(problems) == verify.MAX_ROW_PROBLEMS + 1 and problems[-1].endswith("3 more rows with problems")
    rows = [{**r, "loss_mask": [0] * SEQ} for r in good_rows(2)]
    write_split(sample_dir, "validation", rows, layout.read_meta(sample_dir / "data"))
    assert any("validation.npy: no token has loss_mask 1" in p for p in verify.verify(sample_dir))


def change_a_token(path) -> None:
    data = bytearray(path.read_bytes())
    at = bytes(data).find(np.arange(SEQ, dtype=np.int32).tobytes())
    data[at] = 7  # token 0 -> 7: still a valid file of the same size
    path.write_bytes(bytes(data))


def test_fast_catches_a_changed_byte_of_the_same_size(sample_dir, capsys):
    path = sample_dir / "data" / "train.npy"
    change_a_token(path)
    assert verify.verify(sample_dir) == [
        f"{path}: sampled blocks differ from meta.json (modified in place or corrupt)"
    ]
    assert verify.main([str(sample_dir), "--preflight"]) == 1
    assert "train.npy: sampled blocks differ" in capsys.readouterr().err


def test_without_recorded_blocks_fast_notes_the_skip_and_full_catches_a_changed_byte(sample_dir, capsys):
    set_meta(sample_dir, train__sampled_sha256=None)
    path = sample_dir / "data" / "train.npy"
    change_a_token(path)
    assert verify.verify(sample_dir) == []
    assert verify.main([str(sample_dir), "--preflight"]) == 0
    assert "no sampled-block checksums recorded for data/train.npy" in capsys.readouterr().out
    (problem,) = verify.verify(sample_dir, full=True)
    assert problem.startswith(f"{path}: checksum mismatch: md5")


def test_the_tokenizer_must_match_the_data(sample_dir):
    word_tokenizer(sample_dir / "model", 60)
    assert verify.verify(sample_dir) == [
        f"{sample_dir / 'model' / 'tokenizer.json'}: 60 tokens, the data was made with 50"
    ]


def test_datadir_holding_the_rows_needs_model(sample_dir):
    """DATADIR may be the rows' folder (NVIDIA's gov_report/), with MODEL naming the checkpoint."""
    (problem,) = verify.verify(sample_dir / "data")
    assert "set MODEL to the Hugging Face checkpoint's folder" in problem
    assert verify.verify(sample_dir / "data", model_folder=sample_dir / "model") == []


@pytest.fixture
def mlperf_dir(world, tmp_path):
    """The stand-in MLCommons set without meta.json (as AMD's scripts leave it) and a Llama 2 70B folder."""
    folder = tmp_path / "mlperf"
    for split, rows in world.rows.items():
        layout.save_rows(folder / "data" / f"{split}.npy", rows)
    write_fake_model(folder / "model")
    return folder


def test_the_mlcommons_set_without_meta_json(mlperf_dir):
    assert verify.verify(mlperf_dir, full=True) == []  # sizes, rows and AMD's checksum from the constants
    path = mlperf_dir / "data" / "validation.npy"
    path.write_bytes(path.read_bytes()[:-1])
    (problem,) = verify.verify(mlperf_dir)
    assert problem.startswith(f"{path}: ") and "(truncated or modified)" in problem


def test_a_missing_or_cut_off_shard_is_named(mlperf_dir):
    shard = mlperf_dir / "model" / "model-00002-of-00002.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[:-2])
    assert verify.verify(mlperf_dir) == [
        f"{shard}: {len(data) - 2:,} bytes, its header describes {len(data):,} (truncated or modified)"
    ]
    shard.unlink()
    assert verify.verify(mlperf_dir) == [f"missing: {shard} (listed in model.safetensors.index.json)"]
    index = mlperf_dir / "model" / "model.safetensors.index.json"
    (mlperf_dir / "model" / "model-00001-of-00002.safetensors").rename(shard)
    problems = verify.verify(mlperf_dir)
    assert any("lacks 11 tensors the index puts there (first: lm_head.weight)" in p for p in problems), (
        problems
    )
    index.unlink()
    assert "no safetensors weights" in verify.verify(mlperf_dir)[0]


def test_the_model_must_be_llama_2_70b(mlperf_dir):
    write_fake_model(mlperf_dir / "model", num_hidden_layers=3)  # the stand-in's is 2
    assert verify.verify(mlperf_dir) == [
        f"{mlperf_dir / 'model' / 'config.json'}: num_hidden_layers is 3, Llama 2 70B's is 2"
    ]
    shutil.rmtree(mlperf_dir / "model")
    assert verify.verify(mlperf_dir) == [
        f"missing: {mlperf_dir / 'model'} (the model folder: weights and tokenizer)"
    ]


def test_sizes_recorded_at_download_are_checked(mlperf_dir, monkeypatch):
    """As for a 10 GB shard: its size and sampled blocks by the fast check, its sha256 by --full."""
    from input_preprocessing.llama2_70b_lora import model

    monkeypatch.setattr(verify, "WHOLE_HASH_MAX", 0)  # the stand-in's shards are small

    shard = mlperf_dir / "model" / "model-00001-of-00002.safetensors"
    meta = {"revision": "abc", "files": {shard.name: {"size": shard.stat().st_size + 1, "sha256": "0" * 64}}}
    (mlperf_dir / "model" / model.META).write_text(json.dumps(meta))
    (problem,) = verify.verify(mlperf_dir)
    assert (
        problem == f"{shard}: {shard.stat().st_size:,} bytes, {shard.stat().st_size + 1:,} when downloaded "
        "(truncated or modified)"
    )
    meta["files"][shard.name]["size"] -= 1
    (mlperf_dir / "model" / model.META).write_text(json.dumps(meta))
    assert verify.verify(mlperf_dir) == []
    assert verify.verify(mlperf_dir, full=True) == [
        f"{shard}: checksum mismatch: sha256 differs from the one recorded when it was downloaded (modified "
        "in place or corrupt)"
    ]
    meta["files"][shard.name][KEY] = sampled_sha256(shard)  # as the download records it
    (mlperf_dir / "model" / model.META).write_text(json.dumps(meta))
    assert verify.verify(mlperf_dir) == []
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # a byte of a tensor, overwritten in place
    shard.write_bytes(bytes(data))
    assert verify.verify(mlperf_dir) == [
        f"{shard}: sampled blocks differ from meta.json (modified in place or corrupt)"
    ]


def test_the_sample_s_base_model_is_recorded_and_damage_in_it_is_named(sample_dir, capsys):
    """The tiny base the CPU default fine-tunes (2 pretraining steps here): 4 KiB overwritten in place in its
    model.safetensors is named by the preflight and --full (unnamed, it would end the run "diverged")."""
    from input_preprocessing.llama2_70b_lora import model, sample_model

    sample_model.make_base_model(sample_dir, steps=2)
    assert set(model.read_meta(sample_dir / "model")["files"]) == {"config.json", "model.safetensors"}
    assert verify.verify(sample_dir) == [] and verify.verify(sample_dir, full=True) == []
    weights = sample_dir / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4096] = bytes(4096)  # zeros over 4 KiB of weights, the size kept
    weights.write_bytes(bytes(data))
    for full in (False, True):
        (problem,) = verify.verify(sample_dir, full=full)
        assert problem.startswith(f"{weights}: ") and "(modified in place or corrupt)" in problem
    assert verify.main([str(sample_dir), "--preflight"]) == 1
    assert "model.safetensors" in capsys.readouterr().err


def test_the_checkpoint_s_tensors_are_checked_from_the_headers(mlperf_dir):
    """Names and shapes against config.json's Llama, in the fast check: not minutes into loading."""
    from safetensors.numpy import load_file, save_file

    folder = mlperf_dir / "model"
    shard, index = folder / "model-00002-of-00002.safetensors", folder / "model.safetensors.index.json"
    tensors = load_file(str(shard))
    tensors["model.layers.1.mlp.down_proj.weight"] = np.zeros((8, 17), np.float16)  # intermediate 16
    save_file(tensors, str(shard))
    assert verify.verify(mlperf_dir) == [
        f"{shard}: model.layers.1.mlp.down_proj.weight has shape [8, 17], "
        "its config.json's Llama needs [8, 16]"
    ]
    del tensors["lm_head.weight"]
    tensors["model.layers.1.mlp.down_proj.weight"] = np.zeros((8, 16), np.float16)
    save_file(tensors, str(shard))
    weight_map = json.loads(index.read_text())
    del weight_map["weight_map"]["lm_head.weight"]
    index.write_text(json.dumps(weight_map))
    (problem,) = verify.verify(mlperf_dir)
    assert problem.startswith(f"{folder}: the checkpoint lacks 1 tensor(s)") and "lm_head.weight" in problem


def test_the_tensors_named_are_the_trainer_s():
    """model.hf_tensors says what training.llama.checkpoint loads: our Llama's parameters, Hugging Face's
    names, the same shapes."""
    import torch

    from input_preprocessing.llama2_70b_lora import model
    from training.llama.checkpoint import hf_name
    from training.llama.model import Llama, LlamaShape

    config = {
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 3,
        "vocab_size": 100,
    }
    shape = LlamaShape(
        num_layers=3,
        hidden_size=64,
        ffn_hidden_size=96,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=100,
        rope_scaling=None,
    )
    with torch.device("meta"):
        ours = {hf_name(n): tuple(p.shape) for n, p in Llama(shape).named_parameters()}
    assert model.hf_tensors(config) == ours
