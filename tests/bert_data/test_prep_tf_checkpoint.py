"""TF1 checkpoint reading and conversion, against a checkpoint written by TensorFlow's own Saver
(tests/data/tf1_bert_tiny*, made by make_tf1_fixture.py; the values TensorFlow read back are in the .npz)."""

import json
import shutil

import numpy as np
import pytest
import torch

from input_preprocessing.bert.tf_checkpoint import (
    CheckpointError,
    Tf1Checkpoint,
    convert,
    crc32c,
    expected_shapes,
    main,
    save_torch,
)
from tests.bert_data.helpers import REPO

DATA = REPO / "tests" / "data"
PREFIX = DATA / "tf1_bert_tiny.ckpt"


@pytest.fixture(scope="module")
def expected():
    with np.load(DATA / "tf1_bert_tiny_expected.npz") as f:
        return {name: f[name] for name in f.files}


@pytest.fixture(scope="module")
def config():
    return json.loads((DATA / "tf1_bert_tiny_config.json").read_text())


def test_reader_returns_exactly_what_tensorflow_wrote(expected):
    ckpt = Tf1Checkpoint(PREFIX)
    assert ckpt.names() == sorted(expected)
    for name, value in expected.items():
        got = ckpt.read(name)
        assert got.dtype == value.dtype and got.shape == value.shape and np.array_equal(got, value), name


def test_conversion_maps_names_and_transposes_kernels(expected, config):
    state = convert(PREFIX, config)
    tf = expected
    assert np.array_equal(
        state["bert.embeddings.word_embeddings.weight"], tf["bert/embeddings/word_embeddings"]
    )
    assert np.array_equal(state["bert.embeddings.LayerNorm.weight"], tf["bert/embeddings/LayerNorm/gamma"])
    assert np.array_equal(state["bert.embeddings.LayerNorm.bias"], tf["bert/embeddings/LayerNorm/beta"])
    for n in range(config["num_hidden_layers"]):
        t, p = f"bert/encoder/layer_{n}/", f"bert.encoder.layer.{n}."
        for a, b in [
            ("attention/self/query", "attention.self.query"),
            ("attention/self/key", "attention.self.key"),
            ("attention/self/value", "attention.self.value"),
            ("attention/output/dense", "attention.output.dense"),
            ("intermediate/dense", "intermediate.dense"),
            ("output/dense", "output.dense"),
        ]:
            assert np.array_equal(state[p + b + ".weight"], tf[t + a + "/kernel"].T)
            assert np.array_equal(state[p + b + ".bias"], tf[t + a + "/bias"])
        for a, b in [
            ("attention/output/LayerNorm", "attention.output.LayerNorm"),
            ("output/LayerNorm", "output.LayerNorm"),
        ]:
            assert np.array_equal(state[p + b + ".weight"], tf[t + a + "/gamma"])
            assert np.array_equal(state[p + b + ".bias"], tf[t + a + "/beta"])
    assert np.array_equal(state["bert.pooler.dense.weight"], tf["bert/pooler/dense/kernel"].T)
    assert np.array_equal(
        state["cls.predictions.transform.dense.weight"], tf["cls/predictions/transform/dense/kernel"].T
    )
    assert np.array_equal(state["cls.predictions.bias"], tf["cls/predictions/output_bias"])
    assert np.array_equal(state["cls.predictions.decoder.weight"], tf["bert/embeddings/word_embeddings"])
    assert np.array_equal(state["cls.seq_relationship.weight"], tf["cls/seq_relationship/output_weights"])
    assert np.array_equal(state["cls.seq_relationship.bias"], tf["cls/seq_relationship/output_bias"])
    # Everything NVIDIA's BertForPretraining has, nothing else (optimizer slots and global_step are dropped;
    # its decoder has no bias of its own).
    assert set(state) == set(expected_shapes(config)) | {"cls.predictions.decoder.weight"}
    assert all(v.dtype == np.float32 for v in state.values())


def test_command_line_writes_nvidias_checkpoint_format(tmp_path, expected, config):
    out = tmp_path / "model.pt"
    assert main([str(PREFIX), str(out), "--bert-config", str(DATA / "tf1_bert_tiny_config.json")]) == 0
    saved = torch.load(out, weights_only=True)
    assert list(saved) == ["model"]  # NVIDIA's convert_tf_checkpoint.py: torch.save({"model": state_dict})
    state = saved["model"]
    assert (
        state["cls.predictions.decoder.weight"].data_ptr()
        == state["bert.embeddings.word_embeddings.weight"].data_ptr()
    )
    weight = state["bert.encoder.layer.0.intermediate.dense.weight"]
    assert weight.shape == (16, 8) and torch.equal(
        weight, torch.from_numpy(expected["bert/encoder/layer_0/intermediate/dense/kernel"].T.copy())
    )


def test_the_vocabulary_is_padded_as_nvidias_converter_pads_it_and_both_readers_agree(tmp_path, config):
    """A vocabulary of 21 (not a multiple of 8) is written as 24 rows, the 3 added ones zero, the decoder
    still tied to the embeddings; this toolkit's trainer reads that file and a plain state dict alike."""
    from training.bert.model import BertForPackedPretraining, BertShape, load_pretrained

    state = convert(PREFIX, config)
    for key in ("bert.embeddings.word_embeddings.weight", "cls.predictions.bias"):
        state[key] = np.ascontiguousarray(state[key][:21])
    state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]
    save_torch(state, tmp_path / "nvidia.pt")
    saved = torch.load(tmp_path / "nvidia.pt", weights_only=True)["model"]
    embeddings, bias = saved["bert.embeddings.word_embeddings.weight"], saved["cls.predictions.bias"]
    assert embeddings.shape == (24, 8) and bias.shape == (24,)
    assert not embeddings[21:].any() and not bias[21:].any()
    assert torch.equal(embeddings[:21], torch.from_numpy(state["bert.embeddings.word_embeddings.weight"]))
    assert saved["cls.predictions.decoder.weight"].data_ptr() == embeddings.data_ptr()

    plain = {k: torch.from_numpy(v) for k, v in state.items()}  # what this toolkit wrote before
    torch.save(plain, tmp_path / "plain.pt")
    shape = BertShape(
        vocab_size=21,
        hidden_size=8,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=16,
    )
    loaded = []
    for name in ("nvidia.pt", "plain.pt"):
        model = BertForPackedPretraining(shape)
        assert load_pretrained(model, tmp_path / name) == len(model.state_dict())
        loaded.append(model.state_dict())
    assert all(torch.equal(loaded[0][k], loaded[1][k]) for k in loaded[0])
    assert torch.equal(loaded[0]["embeddings.word_embeddings.weight"], embeddings[:21])


def test_a_config_that_does_not_match_is_an_error(config):
    with pytest.raises(CheckpointError, match="shape"):
        convert(PREFIX, {**config, "hidden_size": 16})
    with pytest.raises(CheckpointError, match="missing bert.encoder.layer.2"):
        convert(PREFIX, {**config, "num_hidden_layers": 3})


def test_corrupt_data_is_caught_by_crc(tmp_path):
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copyfile(f"{PREFIX}{suffix}", tmp_path / f"c{suffix}")
    data = bytearray((tmp_path / "c.data-00000-of-00001").read_bytes())
    entry = Tf1Checkpoint(tmp_path / "c").entries["bert/pooler/dense/kernel"]
    data[entry.offset + 3] ^= 0x40
    (tmp_path / "c.data-00000-of-00001").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="CRC32C mismatch for bert/pooler/dense/kernel"):
        convert(tmp_path / "c")


def test_damaged_or_missing_index_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such checkpoint index"):
        Tf1Checkpoint(tmp_path / "none")
    (tmp_path / "t.index").write_bytes((DATA / "tf1_bert_tiny.ckpt.index").read_bytes()[:-10])
    with pytest.raises(CheckpointError, match="not a TensorFlow checkpoint index"):
        Tf1Checkpoint(tmp_path / "t")


def test_crc32c():
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    data = np.random.default_rng(1).integers(0, 256, 1_000_003, dtype=np.uint8).tobytes()
    assert crc32c(data) == crc32c(data, lane_bytes=len(data) + 1)  # lanes vs one byte at a time
