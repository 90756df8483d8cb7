"""The GovReport parquet columns to rows: loss_mask from labels, int32 tokens; read with pyarrow (where it is
installed: the image and CI) into the same bytes as AMD's converter under numpy 1.x."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from input_preprocessing.common.checksums import file_hash
from input_preprocessing.common.runtime import PrepError
from input_preprocessing.llama2_70b_lora import govreport
from tests.llama2_70b_lora_data.make_numpy1_golden import SHAPES, columns
from tests.llama2_70b_lora_data.test_layout import GOLDEN


def test_rows_from_columns():
    ids = np.array([5, 6, 7, 8, 9], np.int64)
    labels = np.array([-100, 6, -100, -100, 9])
    rows = govreport.rows_from_columns(ids, np.array([0, 2, 5]), labels, np.array([0, 2, 5]))
    assert [r["loss_mask"] for r in rows] == [[0, 1], [0, 0, 1]]
    assert [r["seq_start_id"] for r in rows] == [[0], [0]]
    assert rows[1]["input_ids"].dtype == np.int32 and rows[1]["input_ids"].tolist() == [7, 8, 9]
    with pytest.raises(PrepError, match="input_ids and labels differ in length"):
        govreport.rows_from_columns(ids, np.array([0, 2, 5]), labels, np.array([0, 3, 5]))
    with pytest.raises(PrepError, match="outside int32"):
        govreport.rows_from_columns(ids - 10, np.array([0, 5]), labels, np.array([0, 5]))


def test_parquet_to_the_bytes_of_amds_converter(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    for split in SHAPES:
        ids, labels = columns(split)
        table = pa.table(
            {
                "input_ids": pa.array([r.tolist() for r in ids], type=pa.list_(pa.int32())),
                "attention_mask": pa.array([[1] * len(r) for r in ids], type=pa.list_(pa.int8())),
                "labels": pa.array([r.tolist() for r in labels], type=pa.list_(pa.int64())),
            }
        )
        pq.write_table(table, tmp_path / f"{split}.parquet", row_group_size=2)  # several chunks
        rows, length = SHAPES[split]
        meta = govreport.convert(tmp_path / f"{split}.parquet", tmp_path / f"{split}.npy", rows, length)
        assert (tmp_path / f"{split}.npy").read_bytes() == (GOLDEN / f"{split}.npy").read_bytes()
        assert meta["md5"] == file_hash(GOLDEN / f"{split}.npy") and meta["rows"] == rows
    with pytest.raises(PrepError, match="5 rows, expected 6"):
        govreport.convert(tmp_path / "train.parquet", tmp_path / "x.npy", 6, SHAPES["train"][1])
    with pytest.raises(PrepError, match="5 rows are not 16 tokens long"):
        govreport.convert(tmp_path / "train.parquet", tmp_path / "x.npy", 5, 16)


def test_without_pyarrow_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(PrepError, match="pip install pyarrow"):
        govreport.read_parquet_rows(tmp_path / "train.parquet")
