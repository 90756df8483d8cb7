"""Data preparation: the C4 download path (with a local stand-in for MLCommons' R2 downloader: no network
here), structure and checksum verification with its resumable cache, and the sample path's output."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from input_preprocessing.common.runtime import PrepError
from input_preprocessing.llama31_8b import verify
from input_preprocessing.llama31_8b.preprocess import write_indexed_dataset
from tests.llama.helpers import ROOT, subprocess_env

PREPARE = ROOT / "input_preprocessing" / "llama31_8b" / "prepare_data.sh"

# Stands in for mlc-r2-downloader.sh with the same command line (`-d DIR URI`) and the same behaviour that
# matters here: fetch <name>.md5, fetch the files it lists (resuming: existing complete files are kept),
# then `md5sum -c`. "Fetching" is a copy from $FAKE_BUCKET/<name>/.
FAKE_DOWNLOADER = r"""#!/usr/bin/env bash
set -euo pipefail
while getopts "d:" opt; do case $opt in d) dir=$OPTARG ;; *) exit 1 ;; esac; done
shift $((OPTIND - 1))
name=$(basename -s .uri "$1")
echo "$1" >> "$FAKE_BUCKET/requests.log"
mkdir -p "$dir"
cp "$FAKE_BUCKET/$name/$name.md5" "$dir/"
sed 's/^[a-f0-9]\{32\}[[:space:]]*//' "$dir/$name.md5" | while read -r f; do
  [[ -f "$dir/$f" ]] || cp "$FAKE_BUCKET/$name/$f" "$dir/$f"
done
(cd "$dir" && md5sum -c --quiet "$name.md5")
"""


def md5_list(folder: Path, name: str) -> None:
    """The dataset's md5 list, and in metadata/ beside it the `.uri` (its base URL) and a copy of the list, as
    MLCommons' bucket serves them."""
    lines = [
        f"{hashlib.md5(p.read_bytes()).hexdigest()}  ./{p.name}"
        for p in sorted(folder.iterdir())
        if p.is_file() and p.suffix != ".md5"
    ]
    (folder / f"{name}.md5").write_text("\n".join(lines) + "\n")
    (folder.parent / "metadata").mkdir(exist_ok=True)
    (folder.parent / "metadata" / f"{name}.uri").write_text(folder.as_uri() + "\n")
    shutil.copyfile(folder / f"{name}.md5", folder.parent / "metadata" / f"{name}.md5")


def bucket_env(bucket: Path) -> dict[str, str]:
    metadata = (bucket / "metadata").as_uri()
    return {
        "R2_DOWNLOADER": str(bucket / "downloader.sh"),
        "FAKE_BUCKET": str(bucket),
        "DATASET_URI": f"{metadata}/llama-3-1-8b-preprocessed-c4-dataset.uri",
        "TOKENIZER_URI": f"{metadata}/llama-3-1-8b-tokenizer.uri",
    }


@pytest.fixture(scope="module")
def bucket(tmp_path_factory, demo_data) -> Path:
    """A stand-in for the two R2 datasets: C4-named indexed files (91,205 validation documents) and the
    tokenizer, here the demo's (vocabulary 4096, so the Llama 3.1 tokenizer check must report it)."""
    root = tmp_path_factory.mktemp("bucket")
    c4 = root / "llama-3-1-8b-preprocessed-c4-dataset"
    rng = np.random.default_rng(0)
    write_indexed_dataset((rng.integers(0, 128256, 3) for _ in range(500)), c4 / verify.TRAIN_PREFIX, 128256)
    write_indexed_dataset(
        (rng.integers(0, 128256, 1) for _ in range(verify.VALID_DOCUMENTS)), c4 / verify.VALID_PREFIX, 128256
    )
    for extra in ("LICENSE.txt", "NOTICE.txt"):  # beside the data, as NVIDIA's expected-mounts-8b.csv lists
        (c4 / extra).write_text("licence\n")
    md5_list(c4, c4.name)
    tok = root / "llama-3-1-8b-tokenizer"
    tok.mkdir()
    for f in (demo_data / "tokenizer").iterdir():
        (tok / f.name).write_bytes(f.read_bytes())
    md5_list(tok, tok.name)
    (root / "downloader.sh").write_text(FAKE_DOWNLOADER)
    return root


def prepare(out: Path, bucket: Path) -> subprocess.CompletedProcess:
    env = subprocess_env(**bucket_env(bucket), PYTHON="python3")
    env["PATH"] = f"{Path(__import__('sys').executable).parent}:{env['PATH']}"
    return subprocess.run(
        ["bash", str(PREPARE), "--outputdir", str(out)], capture_output=True, text=True, env=env, timeout=300
    )


def test_download_verifies_and_a_rerun_downloads_nothing(tmp_path, bucket):
    out = tmp_path / "c4"
    proc = prepare(out, bucket)
    # everything arrives and checks out, except that this stand-in tokenizer is not Llama 3.1's
    assert (
        proc.returncode == 1
        and "vocabulary 4096 / EOD '<|end_of_text|>', expected Llama 3.1's" in proc.stderr
    )
    requests = (bucket / "requests.log").read_text().split()
    assert [Path(r).name for r in requests] == [
        "llama-3-1-8b-preprocessed-c4-dataset.uri",
        "llama-3-1-8b-tokenizer.uri",
    ]
    assert verify.verify(out / "data", md5=True) == []
    cache = json.loads((out / "data" / verify.CACHE_NAME).read_text())
    assert set(cache) == {
        f"{p}{e}" for p in (verify.TRAIN_PREFIX, verify.VALID_PREFIX) for e in (".bin", ".idx")
    } | {"LICENSE.txt", "NOTICE.txt"}
    assert verify.check_md5(out / "data") == ([], 0)  # cached: nothing re-hashed


def test_the_free_disk_is_checked_against_both_datasets_before_anything_is_fetched(
    tmp_path, bucket, monkeypatch
):
    """The bucket's sizes of both datasets (the C4 files and the tokenizer dataset, which also carries the 8B
    weights); without an answer from the bucket, the published C4 size and the estimate of the tokenizer's."""
    from input_preprocessing.common import runtime
    from input_preprocessing.llama31_8b import download

    env = bucket_env(bucket)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(runtime.shutil, "disk_usage", lambda _: type("Usage", (), {"free": 2**20})())
    out = tmp_path / "out"
    c4, tokenizer = (
        sum(p.stat().st_size for p in (bucket / name).iterdir() if p.suffix != ".md5")
        for name in ("llama-3-1-8b-preprocessed-c4-dataset", "llama-3-1-8b-tokenizer")
    )
    log = bucket / "requests.log"
    fetched = log.read_text() if log.exists() else ""
    with pytest.raises(PrepError) as err:
        download.download(out)
    free = "1,048,576 bytes free (0.0 GiB)"
    assert str(err.value).startswith(
        f"not enough free disk under {out}: {free}, about {c4 + tokenizer:,} bytes"
    )
    assert "(data/: the bucket; model/: the bucket)" in str(err.value)
    monkeypatch.setenv("TOKENIZER_URI", f"{env['TOKENIZER_URI']}.missing.uri")  # the bucket does not answer
    with pytest.raises(PrepError) as err:
        download.download(out)
    assert f"about {c4 + download.TOKENIZER_DATASET_BYTES:,} bytes needed" in str(err.value)
    assert "model/: an estimate: the tokenizer and the 8B weights twice" in str(err.value)
    assert download.main(["--outputdir", str(out)]) == 1
    assert (log.read_text() if log.exists() else "") == fetched  # nothing fetched
    monkeypatch.setattr(runtime.shutil, "disk_usage", lambda _: type("Usage", (), {"free": 2**50})())
    monkeypatch.setenv("TOKENIZER_URI", env["TOKENIZER_URI"])
    download.download(out)
    assert (out / "data" / f"{verify.TRAIN_PREFIX}.bin").is_file() and (
        out / "model" / "tokenizer.json"
    ).is_file()


def test_amds_layout_passes_verify_and_preflight(tmp_path, bucket, monkeypatch, capsys):
    """The folder AMD's README makes (v5.1 AMD/benchmarks/llama31_8b/implementations/*/README.md): `cd
    /data/mlperf_llama31_8b`, then MLCommons' R2 downloader `-d data <c4>.uri` and `-d model
    <tokenizer>.uri`; DATADIR=.../data (the C4 files, LICENSE.txt, NOTICE.txt, the md5 list),
    MODEL=.../model. Read as it is: our verify (fast, --md5, --preflight) and the benchmark's preflight."""
    from training.llama31_8b.preflight import check

    env = bucket_env(bucket)
    amd = tmp_path / "mlperf_llama31_8b"
    amd.mkdir()
    for folder, uri in (("data", env["DATASET_URI"]), ("model", env["TOKENIZER_URI"])):
        subprocess.run(
            ["bash", env["R2_DOWNLOADER"], "-d", folder, uri],
            cwd=amd,
            check=True,
            env=subprocess_env(FAKE_BUCKET=str(bucket)),
        )
    data = amd / "data"
    assert verify.main([str(data)]) == 0 and verify.main([str(data), "--md5"]) == 0
    monkeypatch.delenv("TRAIN_DATA_PREFIX", raising=False)
    monkeypatch.delenv("VALID_DATA_PREFIX", raising=False)
    assert verify.main([str(data), "--preflight"]) == 0, capsys.readouterr().err
    demo = {
        "CPU_DEMO": "1",
        "GBS": "8",
        "MBS": "4",
        "MAX_LR": "3e-3",
        "WARMUP_STEPS": "16",
        "SEQ_LENGTH": "64",
        "NUM_LAYERS": "2",
        "HIDDEN_SIZE": "64",
        "FFN_HIDDEN_SIZE": "192",
        "NUM_ATTENTION_HEADS": "4",
        "NUM_QUERY_GROUPS": "2",
        "VOCAB_SIZE": "128256",
    }
    assert (
        check(
            {
                **demo,
                "DATADIR": str(data),
                "MODEL": str(amd / "model"),
                "INDEX_CACHE_DIR": str(tmp_path / "idx"),
            }
        )
        == []
    )


def test_verify_names_missing_truncated_and_corrupt_files(tmp_path, bucket):
    data = tmp_path / "data"
    src = bucket / "llama-3-1-8b-preprocessed-c4-dataset"
    data.mkdir()
    for f in src.iterdir():
        (data / f.name).write_bytes(f.read_bytes())
    assert verify.verify(data, md5=True) == []
    (data / f"{verify.TRAIN_PREFIX}.bin").unlink()
    assert verify.verify(data) == [f"missing: {data / verify.TRAIN_PREFIX}.bin"]
    (data / f"{verify.TRAIN_PREFIX}.bin").write_bytes((src / f"{verify.TRAIN_PREFIX}.bin").read_bytes()[:-4])
    problems = verify.verify(data, md5=True)
    assert any("truncated" in p for p in problems) and any("checksum mismatch" in p for p in problems)
    (data / f"{verify.TRAIN_PREFIX}.bin").write_bytes((src / f"{verify.TRAIN_PREFIX}.bin").read_bytes())
    assert verify.verify(data, md5=True) == []  # a repaired file is checked again, not trusted from the cache


def test_fast_verify_sees_bytes_overwritten_in_place(tmp_path, bucket, capsys):
    data = tmp_path / "data"
    src = bucket / "llama-3-1-8b-preprocessed-c4-dataset"
    data.mkdir()
    for f in src.iterdir():
        (data / f.name).write_bytes(f.read_bytes())
    assert verify.verify(data) == [] and "no file checked with --md5 yet" in capsys.readouterr().out
    assert verify.verify(data, md5=True) == []
    assert verify.verify(data) == [] and "note" not in capsys.readouterr().out
    path = data / f"{verify.TRAIN_PREFIX}.bin"
    with open(path, "r+b") as f:  # same size, bytes changed at the start (a sampled block)
        first = f.read(4)
        f.seek(0)
        f.write(bytes(b ^ 0xFF for b in first))
    assert verify.verify(data) == [
        f"{path}: sampled blocks changed since its md5 was checked (modified in place or corrupt): run "
        "verify --md5"
    ]


def test_sample_data(demo_data):
    manifest = json.loads((demo_data / "manifest.json").read_text())
    assert manifest["vocab_size"] == 4096 and manifest["validation"]["tokens"] >= 1024 * 64 + 1
    assert manifest["train"]["documents"] > 2 * manifest["validation"]["documents"] > 0
    assert (demo_data / "tokenizer" / "tokenizer.json").is_file()


def test_help_is_the_comment_block_at_the_top():
    proc = subprocess.run(["bash", str(PREPARE), "--help"], capture_output=True, text=True, timeout=30)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and lines[0].startswith("Llama 3.1 8B data.")
    assert lines[-1].startswith("R2_DOWNLOADER=") and "set -euo pipefail" not in proc.stdout
