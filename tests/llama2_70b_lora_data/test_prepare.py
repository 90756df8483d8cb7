"""The full preparation against a stand-in Hub: downloads, AMD's checksums, the .npy files, the model's
safetensors, a re-run that downloads nothing, resuming, and the refusals (HF_TOKEN, disk space, licence)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from input_preprocessing.common import runtime
from input_preprocessing.common.runtime import PrepError
from input_preprocessing.llama2_70b_lora import govreport, layout, model, prepare, verify
from tests.llama2_70b_lora_data.conftest import SHARDS, GatedRepoError

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "input_preprocessing" / "llama2_70b_lora" / "prepare_data.sh"
MODEL_FILES = {
    *SHARDS,
    "model.safetensors.index.json",
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
}


def test_prepares_verifies_and_a_rerun_downloads_nothing(world, tmp_path):
    out = tmp_path / "out"
    assert prepare.prepare_full(out) == []
    for split, rows in world.rows.items():
        loaded = np.load(out / "data" / f"{split}.npy", allow_pickle=True)
        assert [r["loss_mask"] for r in loaded] == [r["loss_mask"] for r in rows]
    meta = layout.read_meta(out / "data")
    assert meta["kind"] == "mlperf" and meta["directory_md5"] == govreport.NPY_DIR_MD5
    assert meta["source"] == f"hf://datasets/{govreport.REPO_ID}@{govreport.REVISION}"
    assert not (out / govreport.DOWNLOAD_DIR).exists()  # the parquet files go once the .npy files verify
    assert set(world.hub.downloads()) == set(govreport.PARQUET.values()) | MODEL_FILES  # no .bin, no README
    assert set(model.read_meta(out / "model")["files"]) == MODEL_FILES
    assert not (out / "model" / ".cache").exists()
    assert ("repo_info", govreport.REPO_ID, govreport.REVISION) in world.hub.calls

    world.hub.calls.clear()
    world.hub.token = None  # a finished folder needs neither the Hub nor a token
    assert prepare.prepare_full(out) == []
    assert world.hub.calls == []


def test_no_hf_token_is_refused_before_anything_is_fetched(world, tmp_path):
    world.hub.token = None
    with pytest.raises(PrepError, match="HF_TOKEN is not set.*meta-llama/Llama-2-70b-hf"):
        prepare.prepare_full(tmp_path / "out")
    assert world.hub.calls == [] and not (tmp_path / "out" / "data" / "train.npy").exists()


def test_parquet_checksum_mismatch_is_named(world, tmp_path, monkeypatch):
    monkeypatch.setattr(govreport, "PARQUET_DIR_MD5", "0" * 32)
    with pytest.raises(PrepError, match=r"checksum mismatch: the parquet files' md5 is [0-9a-f]{32}, AMD's"):
        prepare.prepare_full(tmp_path / "out")
    assert not (tmp_path / "out" / "data" / "train.npy").exists()


def test_npy_checksum_mismatch_is_named(world, tmp_path, monkeypatch):
    monkeypatch.setattr(govreport, "NPY_DIR_MD5", "0" * 32)
    with pytest.raises(PrepError, match="checksum mismatch: train.npy \\+ validation.npy have md5"):
        prepare.prepare_full(tmp_path / "out")


def test_a_shard_with_the_wrong_sha256_is_removed_and_named(world, tmp_path):
    world.hub.sha256["model-00002-of-00002.safetensors"] = "f" * 64
    with pytest.raises(PrepError, match="model-00002-of-00002.safetensors: checksum mismatch: sha256"):
        prepare.prepare_full(tmp_path / "out")
    assert not (tmp_path / "out" / "model" / "model-00002-of-00002.safetensors").exists()


def test_an_interrupted_download_resumes_with_the_missing_files(world, tmp_path):
    out = tmp_path / "out"
    world.hub.fail["model-00002-of-00002.safetensors"] = ConnectionError("connection reset")
    with pytest.raises(PrepError, match="could not be read from the Hugging Face Hub \\(ConnectionError"):
        prepare.prepare_full(out)
    done_before = set(model.read_meta(out / "model")["files"])
    assert "model-00001-of-00002.safetensors" in done_before
    world.hub.calls.clear()
    assert prepare.prepare_full(out) == []
    assert set(world.hub.downloads()) == MODEL_FILES - done_before  # the data and the first shard: kept


def test_too_little_disk_is_refused_naming_the_need(world, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime.shutil, "disk_usage", lambda _: type("Usage", (), {"free": 1 << 29})())
    with pytest.raises(PrepError) as err:
        prepare.prepare_full(tmp_path / "out")
    message = str(err.value)
    assert f"not enough free disk under {tmp_path / 'out'}: 536,870,912 bytes free (0.5 GiB)" in message
    assert re.search(r"about [0-9,]+ bytes needed \(1\.0 GiB\)", message)
    assert world.hub.downloads() == []


def test_a_licence_not_accepted_is_named(world, tmp_path):
    world.hub.errors[model.REPO_ID] = GatedRepoError("403 Client Error")
    with pytest.raises(PrepError, match="is gated: accept its licence at https://huggingface.co/meta-llama"):
        prepare.prepare_full(tmp_path / "out")


def test_a_sample_folder_is_not_overwritten(world, tmp_path):
    layout.write_meta(tmp_path / "out" / "data", {"kind": "sample"})
    with pytest.raises(PrepError, match="holds the --sample data"):
        prepare.prepare_full(tmp_path / "out")


def test_command_line(world, tmp_path, capsys):
    assert prepare.main(["--outputdir", str(tmp_path / "out")]) == 0
    assert f"export DATADIR={tmp_path / 'out'}" in capsys.readouterr().out
    assert verify.main([str(tmp_path / "out"), "--preflight"]) == 0
    with pytest.raises(SystemExit) as usage:
        prepare.main(["--outputdir", str(tmp_path / "x"), "--seq-len", "256"])
    assert usage.value.code == 2


def test_the_script_refuses_without_hf_token(tmp_path):
    """Through prepare_data.sh, with the real huggingface_hub and no token anywhere (no network touched)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--outputdir", str(tmp_path / "out")], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 1 and "error: HF_TOKEN is not set" in proc.stderr
    help_ = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, env=env)
    assert help_.returncode == 0 and "--sample" in help_.stdout


def test_meta_json_is_written_atomically_with_the_format(tmp_path):
    layout.write_meta(tmp_path, {"kind": "sample"})
    assert json.loads((tmp_path / layout.META).read_text())["format"] == layout.FORMAT
    (tmp_path / layout.META).write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="format 'other'"):
        layout.read_meta(tmp_path)
