"""A stand-in for the Hugging Face Hub (no network here) and small prepared folders.

`FakeHub` replaces the `huggingface_hub` module: its repositories are local folders, `repo_info` lists their
files with sizes and sha256 as the Hub does, `hf_hub_download` copies, and every call is recorded. The
GovReport stand-in is two small "parquet" files whose rows (`SPLIT_ROWS` rows of `SEQ` tokens) the world
fixture's `read_parquet_rows` returns, with govreport's constants (row counts, sizes, AMD's checksums) set to
match, so the whole preparation runs as it does on the real set. The model stand-in is a Llama 2 70B of two
blocks of width 8 (`STANDIN_SHAPE`, set as model.SHAPE): its config.json, its tensors in two safetensors
shards with their index, a 32,000-token tokenizer and a `.bin` file that must not be fetched.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from tokenizers import Tokenizer, models

from input_preprocessing.common.checksums import file_hash
from input_preprocessing.llama2_70b_lora import govreport, layout, model

SEQ = 16
SPLIT_ROWS = {"train": 6, "validation": 3}
# The stand-in "Llama 2 70B": its vocabulary, 2 blocks of width 8 (model.SHAPE is set to it for these tests,
# as govreport's constants are set to the stand-in set's), its tensors in two shards
STANDIN_SHAPE = {
    **model.SHAPE,
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
}
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


@pytest.fixture(autouse=True)
def standin_70b(monkeypatch):
    monkeypatch.setattr(model, "SHAPE", STANDIN_SHAPE)


class GatedRepoError(Exception):
    pass


class RepositoryNotFoundError(Exception):
    pass


def synthetic_rows(split: str, seq: int = SEQ, vocab: int = 32000) -> list[dict]:
    rows = SPLIT_ROWS[split]
    rng = np.random.default_rng(len(split))
    ids = rng.integers(0, vocab, rows * seq).astype(np.int64)
    labels = np.where(rng.random(rows * seq) < 0.5, -100, ids)
    offsets = np.arange(rows + 1) * seq
    return govreport.rows_from_columns(ids, offsets, labels, offsets)


def word_tokenizer(folder: Path, vocab: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0")).save(
        str(folder / "tokenizer.json")
    )
    return folder


def write_fake_model(folder: Path, **config) -> Path:
    """A Hugging Face model folder of the stand-in's config (with `config`'s changes): every tensor its Llama
    has, the first block's in the first shard and the rest in the second, as Hugging Face shards them."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], **STANDIN_SHAPE, **config}
    (folder / "config.json").write_text(json.dumps(config))
    tensors = model.hf_tensors(config)
    first = [n for n in tensors if n.startswith(("model.embed_tokens.", "model.layers.0."))]
    weight_map = {n: SHARDS[0] if n in first else SHARDS[1] for n in tensors}
    for i, shard in enumerate(SHARDS):
        held = {n: np.full(shape, i, np.float16) for n, shape in tensors.items() if weight_map[n] == shard}
        save_file(held, str(folder / shard))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    word_tokenizer(folder, STANDIN_SHAPE["vocab_size"])
    (folder / "tokenizer_config.json").write_text('{"bos_token": "t1", "eos_token": "t2"}')
    return folder


@dataclass
class FakeHub:
    """Stands in for the `huggingface_hub` module (install with `install`)."""

    root: Path
    token: str | None = "hf_test"
    calls: list[tuple] = field(default_factory=list)
    fail: dict[str, Exception] = field(default_factory=dict)  # file name -> raised by its next download
    errors: dict[str, Exception] = field(default_factory=dict)  # repo id -> raised by repo_info
    sha256: dict[str, str] = field(default_factory=dict)  # file name -> the sha256 the "Hub" reports

    def module(self) -> types.ModuleType:
        mod = types.ModuleType("huggingface_hub")
        mod.get_token = lambda: self.token
        mod.HfApi = lambda: types.SimpleNamespace(repo_info=self.repo_info)
        mod.hf_hub_download = self.hf_hub_download
        return mod

    def repo_info(self, repo_id, *, repo_type, revision, files_metadata, token):
        self.calls.append(("repo_info", repo_id, revision))
        if repo_id in self.errors:
            raise self.errors[repo_id]
        folder = self.root / repo_id
        siblings = []
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            name = path.relative_to(folder).as_posix()
            sha = self.sha256.get(name, hashlib.sha256(path.read_bytes()).hexdigest())
            siblings.append(
                types.SimpleNamespace(
                    rfilename=name, size=path.stat().st_size, lfs=types.SimpleNamespace(sha256=sha)
                )
            )
        return types.SimpleNamespace(sha=hashlib.sha1(repo_id.encode()).hexdigest(), siblings=siblings)

    def hf_hub_download(self, repo_id, filename, *, repo_type, revision, local_dir, token):
        self.calls.append(("download", repo_id, filename))
        if filename in self.fail:
            raise self.fail.pop(filename)
        target = Path(local_dir) / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.root / repo_id / filename, target)
        return str(target)

    def downloads(self) -> list[str]:
        return [c[2] for c in self.calls if c[0] == "download"]


@pytest.fixture(scope="session")
def hub_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    data = root / govreport.REPO_ID / "data"
    data.mkdir(parents=True)
    for split, name in govreport.PARQUET.items():
        (root / govreport.REPO_ID / name).write_bytes(f"stand-in parquet: {split}".encode())
    write_fake_model(root / model.REPO_ID)
    (root / model.REPO_ID / "pytorch_model-00001-of-00002.bin").write_bytes(b"not to be fetched")
    (root / model.REPO_ID / "README.md").write_text("not to be fetched")
    return root


@dataclass
class World:
    hub: FakeHub
    rows: dict[str, list[dict]]


@pytest.fixture
def world(hub_root, tmp_path, monkeypatch) -> World:
    """The fake Hub installed and govreport's constants set to the stand-in set's."""
    hub = FakeHub(hub_root)
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub.module())
    rows = {split: synthetic_rows(split) for split in SPLIT_ROWS}
    splits, md5s = {}, []
    for split, data in rows.items():
        path = tmp_path / "expected" / f"{split}.npy"
        splits[split] = {"file": f"{split}.npy", "rows": len(data), "size": layout.save_rows(path, data)}
        md5s.append(file_hash(path))
    parquet = [file_hash(hub_root / govreport.REPO_ID / name) for name in govreport.PARQUET.values()]
    monkeypatch.setattr(govreport, "SEQ_LENGTH", SEQ)
    monkeypatch.setattr(govreport, "SPLITS", splits)
    monkeypatch.setattr(govreport, "NPY_DIR_MD5", layout.directory_md5(md5s))
    monkeypatch.setattr(govreport, "PARQUET_DIR_MD5", layout.directory_md5(parquet))
    monkeypatch.setattr(
        govreport, "read_parquet_rows", lambda path: synthetic_rows(Path(path).name.split("-")[0])
    )
    return World(hub, rows)
