"""BERT data folders as AMD's and NVIDIA's own scripts lay them out (tiny files), read as they are: our verify
and the benchmark's preflight pass them; the eval set is checked with NVIDIA's hdf5_md5.py method against its
published digest, and a changed eval file is refused.

NVIDIA (v5.0 `NVIDIA/benchmarks/bert/implementations/nyx_n1_ngc25.04_pytorch`, `input_preprocessing/
prepare_data.sh --packed-data` and `packed_data/prepare_packed_data.sh`): `phase1/` with the TF1 checkpoint
and `model.ckpt-28252.pt` (`convert_tf_checkpoint.py`: `{"model": state_dict}`), `download/results4/` and
its md5 list, `hdf5/eval_varlength/part_eval_10k.hdf5` (`convert_fixed2variable.py`: vlen int16/int8
datasets, `next_sentence_labels` a plain int8 column), the unpacked shards in
`hdf5/training-4320/hdf5_4320_shards_varlength_shuffled/`, and the packed ones in `packed_data/`: `part_NNNNN`
(`create_packed_trainset.py`) beside `shard_list_NNNNN.lst` (`generate_packing_strategy.py`).
AMD (its BERT blog, /work/shared/seeds): `/bert_data/phase1`, `/bert_data/hdf5/eval_varlength`,
`/bert_data/hdf5/packed_data`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from input_preprocessing.bert import download, verify
from input_preprocessing.bert.tf_checkpoint import convert, save_torch
from tests.bert.synthetic import make_sequence, write_packed_shard
from tests.bert_data.helpers import REPO, VOCAB
from training.bert.data import default_train_dir
from training.bert.preflight import check as preflight

FIXTURE = REPO / "tests" / "data"
CONFIG = FIXTURE / "tf1_bert_tiny_config.json"
ENV = {
    "BATCHSIZE": "4",
    "LR": "0.002",
    "MAX_STEPS": "100",
    "CPU_DEMO": "1",
    "EVAL_ITER_START_SAMPLES": "400",
    "EVAL_ITER_SAMPLES": "400",
}


def theirs_hdf5_md5(path: Path) -> str:
    """hdf5_md5.py's digest as its source describes it: the md5 of `str()` of the list of the rows' md5s,
    each the md5 of `str()` of the row's `input_ids` as a Python list."""
    with h5py.File(path, "r") as f:
        rows = [
            hashlib.md5(str(f["input_ids"][i].tolist()).encode("utf-8")).hexdigest()
            for i in range(f["input_ids"].shape[0])
        ]
    return hashlib.md5(str(rows).encode("utf-8")).hexdigest()


def write_nvidia_eval(path: Path, n: int, seed: int = 1) -> None:
    """The eval set as convert_fixed2variable.py writes it."""
    rng = np.random.default_rng(seed)
    seqs = [make_sequence(rng, int(rng.integers(20, 120))) for _ in range(n)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        columns = (
            ("input_ids", "int16"),
            ("segment_ids", "int8"),
            ("masked_lm_positions", "int16"),
            ("masked_lm_ids", "int16"),
        )
        for i, (name, dtype) in enumerate(columns):
            ds = f.create_dataset(name, (n,), dtype=h5py.vlen_dtype(np.dtype(dtype)))
            for k, s in enumerate(seqs):
                ds[k] = s[i]
        f.create_dataset("next_sentence_labels", data=np.array([s[4] for s in seqs], np.int8), dtype="i1")


def write_phase1(phase1: Path) -> None:
    """bert_config.json, vocab.txt, the TF1 checkpoint and its conversion (the tiny fixture's, as NVIDIA's
    convert_tf_checkpoint.py saves it)."""
    phase1.mkdir(parents=True)
    shutil.copyfile(CONFIG, phase1 / "bert_config.json")
    shutil.copyfile(VOCAB, phase1 / "vocab.txt")
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copyfile(FIXTURE / f"tf1_bert_tiny.ckpt{suffix}", phase1 / f"model.ckpt-28252{suffix}")
    (phase1 / "model.ckpt-28252.meta").write_bytes(b"graph")
    save_torch(
        convert(FIXTURE / "tf1_bert_tiny.ckpt", json.loads(CONFIG.read_text())),
        phase1 / "model.ckpt-28252.pt",
    )


def nvidia_folder(root: Path, shards: int = 3) -> Path:
    write_phase1(root / "phase1")
    (root / "download" / "results4").mkdir(parents=True)
    (root / "download" / "results4" / "eval.txt").write_text("text\n")
    (root / "download" / download.TEXT_MD5_LIST).write_text(f"{'0' * 32}  eval.txt\n")
    write_nvidia_eval(root / verify.EVAL_FILE, 40)
    rng = np.random.default_rng(0)
    unpacked = root / "hdf5" / "training-4320" / "hdf5_4320_shards_varlength_shuffled"
    for k in range(2):
        write_nvidia_eval(unpacked / f"part_{k:05d}_of_04320.hdf5", 8, seed=10 + k)
    packed = root / "packed_data"
    packed.mkdir()
    for k in range(shards):
        write_packed_shard(packed / f"part_{k:05d}", rng, 12)
        (packed / f"shard_list_{k:05d}.lst").write_text(json.dumps([[[64, k]]]))
    return root


def amd_folder(root: Path, shards: int = 3) -> Path:
    write_phase1(root / "phase1")
    write_nvidia_eval(root / verify.EVAL_FILE, 40)
    rng = np.random.default_rng(0)
    packed = root / "hdf5" / "packed_data"
    packed.mkdir(parents=True)
    for k in range(shards):
        write_packed_shard(packed / f"part_{k:05d}", rng, 12)
    return root


@pytest.fixture
def published(monkeypatch):
    """MLPerf's bert_config.json md5 and NVIDIA's eval digest set to the tiny stand-ins' (the eval digest
    computed here by hdf5_md5.py's method, not ours)."""
    monkeypatch.setitem(
        download.PUBLISHED_MD5, "bert_config.json", hashlib.md5(CONFIG.read_bytes()).hexdigest()
    )

    def expect(folder: Path) -> Path:
        monkeypatch.setattr(verify, "NVIDIA_EVAL_MD5", theirs_hdf5_md5(folder / verify.EVAL_FILE))
        return folder

    return expect


def test_nvidias_hdf5_md5_method(tmp_path):
    """Our implementation gives what hdf5_md5.py's algorithm gives, on rows of every length (one empty);
    only the token ids enter it."""
    path = tmp_path / "eval.hdf5"
    rows = [np.arange(n, dtype=np.int16) * 7 - 3 for n in (5, 0, 1, 300)]
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("input_ids", (len(rows),), dtype=h5py.vlen_dtype(np.dtype("int16")))
        for i, row in enumerate(rows):
            ds[i] = row
        f.create_dataset("next_sentence_labels", data=np.zeros(len(rows), np.int8))
    assert verify.nvidia_hdf5_md5(path) == theirs_hdf5_md5(path)
    with h5py.File(path, "r+") as f:
        f["next_sentence_labels"][0] = 1
    assert verify.nvidia_hdf5_md5(path) == theirs_hdf5_md5(path)
    with h5py.File(path, "r+") as f:
        f["input_ids"][3] = rows[3] + 1
    assert verify.nvidia_hdf5_md5(path) == theirs_hdf5_md5(path) != verify.NVIDIA_EVAL_MD5


@pytest.mark.parametrize("layout", [nvidia_folder, amd_folder])
def test_their_folder_passes_verify_and_preflight(tmp_path, published, capsys, layout):
    root = published(layout(tmp_path / "bert_data"))
    assert verify.main([str(root)]) == 0, capsys.readouterr().err
    assert verify.main([str(root), "--preflight"]) == 0
    out = capsys.readouterr().out
    packed = "packed_data" if layout is nvidia_folder else "hdf5/packed_data"
    assert f"3 packed shards in {packed}, the eval set is NVIDIA's by its digest" in out
    assert preflight({**ENV, "DATADIR": str(root)}) == []
    assert default_train_dir(root) == root / packed  # where the trainer reads the shards


def test_a_changed_eval_file_is_refused(tmp_path, published, capsys):
    root = published(nvidia_folder(tmp_path / "bert_data"))
    eval_file = root / verify.EVAL_FILE
    with h5py.File(eval_file, "r+") as f:
        row = f["input_ids"][7]
        row[3] += 1
        f["input_ids"][7] = row
    (problem,) = verify.verify(root)
    assert problem == (
        f"{eval_file}: not MLPerf's eval set: its digest by NVIDIA's hdf5_md5.py method is "
        f"{theirs_hdf5_md5(eval_file)}, NVIDIA publishes {verify.NVIDIA_EVAL_MD5} (eval_varlength.chk); "
        "it was changed, or made from other text or settings"
    )
    assert verify.main([str(root), "--preflight"]) == 1
    assert "not MLPerf's eval set" in capsys.readouterr().err


def test_what_their_folder_lacks_is_named(tmp_path, published):
    root = published(nvidia_folder(tmp_path / "bert_data"))
    config, checkpoint = root / "phase1" / "bert_config.json", root / "phase1" / "model.ckpt-28252.pt"
    config.write_text(CONFIG.read_text().replace('"num_hidden_layers": 2', '"num_hidden_layers": 3'))
    (root / "packed_data" / "shard_list_00002.lst").unlink()
    problems = verify.verify(root)
    assert problems[0].startswith(f"{config}: md5 ") and ", MLPerf's is " in problems[0]
    assert problems[1] == f"{checkpoint}: lacks bert.encoder.layer.2.attention.self.query.weight"
    assert problems[-1] == f"{root / 'packed_data'}: 3 shards but 2 shard_list_*.lst files (unfinished?)"
    checkpoint.unlink()
    assert f"missing: {checkpoint} (the converted phase-1 checkpoint)" in verify.verify(root)
    shutil.rmtree(root / "packed_data")
    assert any(p.startswith("no packed training shards: neither") for p in verify.verify(root))
