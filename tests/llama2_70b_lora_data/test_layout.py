"""The `.npy` layout: what `save_rows` writes is what `np.load(..., allow_pickle=True)` gives back, keys and
types as AMD's and NVIDIA's converters make them, byte for byte their numpy 1.x files, at their sizes."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from input_preprocessing.common.checksums import file_hash
from input_preprocessing.llama2_70b_lora import govreport, layout
from tests.llama2_70b_lora_data.make_numpy1_golden import SHAPES, columns

GOLDEN = Path(__file__).parent / "numpy1_golden"


def golden_rows(split: str) -> list[dict]:
    """The rows `convert` makes from the golden's parquet columns."""
    ids, labels = columns(split)
    offsets = np.arange(len(ids) + 1) * SHAPES[split][1]
    return govreport.rows_from_columns(np.concatenate(ids), offsets, np.concatenate(labels), offsets)


@pytest.mark.parametrize("split", SHAPES)
def test_bytes_are_those_of_amds_and_nvidias_converter_under_numpy_1(tmp_path, split):
    size = layout.save_rows(tmp_path / f"{split}.npy", golden_rows(split))
    assert (tmp_path / f"{split}.npy").read_bytes() == (GOLDEN / f"{split}.npy").read_bytes()
    assert size == (GOLDEN / f"{split}.npy").stat().st_size


def test_round_trip_keys_and_types(tmp_path):
    rows = golden_rows("train")
    layout.save_rows(tmp_path / "train.npy", rows)
    loaded = np.load(tmp_path / "train.npy", allow_pickle=True)
    assert loaded.dtype == object and loaded.shape == (len(rows),)
    ids, labels = columns("train")
    for row, want_ids, want_labels in zip(loaded, ids, labels, strict=True):
        assert list(row) == ["input_ids", "loss_mask", "seq_start_id"]
        assert isinstance(row["input_ids"], np.ndarray) and row["input_ids"].dtype == np.int32
        np.testing.assert_array_equal(row["input_ids"], want_ids)
        assert all(type(x) is int for x in row["loss_mask"])  # ints, never bools or numpy scalars
        assert row["loss_mask"] == [int(x != -100) for x in want_labels]
        assert row["seq_start_id"] == [0]
    assert layout.read_header(tmp_path / "train.npy")[:2] == ((len(rows),), np.dtype(object))


def test_header_is_np_saves(tmp_path):
    rows = golden_rows("train")
    layout.save_rows(tmp_path / "ours.npy", rows)
    buffer = io.BytesIO()
    np.save(buffer, np.array(rows, dtype=object))
    offset = layout.read_header(tmp_path / "ours.npy")[2]
    assert (tmp_path / "ours.npy").read_bytes()[:offset] == buffer.getvalue()[:offset]


def test_numpy1_pickle_names_the_old_constructor():
    array = np.empty(1, dtype=object)
    array[0] = layout.make_row(np.arange(3, dtype=np.int32), [0, 1, 1], [0])
    data = layout.numpy1_pickle(array)
    assert data.startswith(b"\x80\x03cnumpy.core.multiarray\n_reconstruct\n")
    assert b"numpy._core" not in data


def test_make_row_wants_int32_and_gives_int_masks():
    with pytest.raises(TypeError, match="int32"):
        layout.make_row(np.arange(3), [0, 1, 1], [0])
    row = layout.make_row(np.arange(3, dtype=np.int32), np.array([False, True, True]), np.array([0]))
    assert row["loss_mask"] == [0, 1, 1] and type(row["loss_mask"][0]) is int
    assert row["seq_start_id"] == [0] and type(row["seq_start_id"][0]) is int


def test_mlcommons_shapes_give_nvidias_file_sizes(tmp_path):
    """NVIDIA's expected-mounts.csv: 192,151,239 and 8,521,136 bytes for 3,901 and 173 rows of 8,192 tokens.
    The size depends only on the shapes and types (token values are raw int32 bytes, masks are 0/1)."""
    for split, spec in govreport.SPLITS.items():
        rows, length = spec["rows"], govreport.SEQ_LENGTH
        offsets = np.arange(rows + 1) * length
        data = govreport.rows_from_columns(
            np.zeros(rows * length, np.int32), offsets, np.zeros(rows * length, np.int64), offsets
        )
        assert layout.save_rows(tmp_path / spec["file"], data) == spec["size"], split
        del data


def test_directory_md5_is_amds_hash(tmp_path):
    """AMD's hash.py: md5 of the sorted per-file md5 hex digests."""
    (tmp_path / "a").write_bytes(b"x")
    (tmp_path / "b").write_bytes(b"y")
    import hashlib

    digests = sorted(hashlib.md5(p.read_bytes()).hexdigest() for p in (tmp_path / "a", tmp_path / "b"))
    want = hashlib.md5("".join(digests).encode()).hexdigest()
    assert layout.directory_md5([file_hash(tmp_path / "b"), file_hash(tmp_path / "a")]) == want
