"""A full disk: what writes atomically leaves no `.tmp` file behind and names the file it could not write."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from input_preprocessing.common.checksums import file_hash
from input_preprocessing.llama31_8b import verify as llama_verify
from training.bert.config import BertConfig
from training.common.config import write_effective_config
from training.common.files import DiskFullError


def full_disk(monkeypatch) -> None:
    """Every Path.write_text runs out of space half-way: the file is created, then ENOSPC."""
    real = Path.write_text

    def write_text(self, data, *args, **kwargs):
        real(self, data[: len(data) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", write_text)


def test_effective_config_on_a_full_disk_is_one_named_error_and_no_tmp(tmp_path, monkeypatch):
    cfg = BertConfig.from_env({"DATADIR": "/data", "BATCHSIZE": "4", "LR": "0.001", "MAX_STEPS": "10"})
    path = tmp_path / "run_1.config.json"
    full_disk(monkeypatch)
    with pytest.raises(DiskFullError, match=f"disk full writing {path}") as err:
        write_effective_config(cfg, path)
    assert err.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def test_the_md5_cache_on_a_full_disk_leaves_no_tmp(tmp_path, monkeypatch):
    (tmp_path / "a.bin").write_bytes(b"data")
    (tmp_path / "a.md5").write_text(f"{file_hash(tmp_path / 'a.bin')}  a.bin\n")
    full_disk(monkeypatch)
    with pytest.raises(OSError, match=f"disk full writing {tmp_path / llama_verify.CACHE_NAME}"):
        llama_verify.check_md5(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "a.md5"]


def test_an_indexed_dataset_cut_short_by_a_full_disk_leaves_no_tmp(tmp_path):
    pytest.importorskip("megatron.core")
    from input_preprocessing.llama31_8b.preprocess import write_indexed_dataset

    def documents():
        yield [1, 2, 3]
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_indexed_dataset(documents(), tmp_path / "c4", vocab_size=100)
    assert list(tmp_path.iterdir()) == []


def test_the_data_preparation_writes_through_the_same_atomic_write(tmp_path, monkeypatch):
    from input_preprocessing.common.runtime import write_json_atomic

    path = tmp_path / ".prep" / "stage.done"
    full_disk(monkeypatch)
    with pytest.raises(DiskFullError, match=f"disk full writing {path}"):
        write_json_atomic(path, {"rows": 1})
    assert list(path.parent.iterdir()) == []
