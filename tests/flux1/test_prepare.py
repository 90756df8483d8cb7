"""Flux.1's data preparation: the three downloads through MLCommons' R2 downloader (a stand-in with the same
command line, reading a local bucket: no network here), the folders placed where the trainer reads them, the
verifier after them, a rerun that fetches nothing, and the free-disk check before anything is fetched."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from input_preprocessing.common.runtime import PrepError
from input_preprocessing.flux1 import download, layout
from tests.llama.helpers import ROOT, subprocess_env

PREPARE = ROOT / "input_preprocessing" / "flux1" / "prepare_data.sh"
NAMES = {
    layout.TRAIN: "flux-1-cc12m-preprocessed",
    layout.VALID: "flux-1-coco-preprocessed",
    layout.EMPTY: "flux-1-empty-encodings",
}

# Stands in for mlc-r2-downloader.sh: `[-d DIR] URI`, DIR defaulting to the dataset's name; fetches the files
# <name>.md5 lists (keeping complete ones: a resume), then `md5sum -c`. "Fetching" copies from the bucket.
FAKE_DOWNLOADER = r"""#!/usr/bin/env bash
set -euo pipefail
dir=""
while getopts "d:" opt; do case $opt in d) dir=$OPTARG ;; *) exit 1 ;; esac; done
shift $((OPTIND - 1))
name=$(basename -s .uri "$1")
dir=${dir:-$name}
echo "$1" >> "$FAKE_BUCKET/requests.log"
mkdir -p "$dir"
cp "$FAKE_BUCKET/$name/$name.md5" "$dir/"
sed 's/^[a-f0-9]\{32\}[[:space:]]*//' "$dir/$name.md5" | while read -r f; do
  [[ -f "$dir/$f" ]] || { mkdir -p "$(dirname "$dir/$f")"; cp "$FAKE_BUCKET/$name/$f" "$dir/$f"; }
done
(cd "$dir" && md5sum -c --quiet "$name.md5")
"""


@pytest.fixture(scope="module")
def bucket(tmp_path_factory, sample_data) -> Path:
    """The three datasets as the bucket serves them: each in a folder of its name holding the split's folder,
    its md5 list, and metadata/<name>.uri and .md5."""
    root = tmp_path_factory.mktemp("bucket")
    (root / "metadata").mkdir()
    for folder, name in NAMES.items():
        shutil.copytree(sample_data / folder, root / name / folder)
        files = sorted(p for p in (root / name).rglob("*") if p.is_file())
        listing = "".join(
            f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.relative_to(root / name)}\n" for p in files
        )
        (root / name / f"{name}.md5").write_text(listing)
        (root / "metadata" / f"{name}.md5").write_text(listing)
        (root / "metadata" / f"{name}.uri").write_text((root / name).as_uri() + "\n")
    (root / "downloader.sh").write_text(FAKE_DOWNLOADER)
    return root


def bucket_env(bucket: Path) -> dict[str, str]:
    meta = (bucket / "metadata").as_uri()
    return {
        "R2_DOWNLOADER": str(bucket / "downloader.sh"),
        "FAKE_BUCKET": str(bucket),
        "CC12M_URI": f"{meta}/{NAMES[layout.TRAIN]}.uri",
        "COCO_URI": f"{meta}/{NAMES[layout.VALID]}.uri",
        "EMPTY_URI": f"{meta}/{NAMES[layout.EMPTY]}.uri",
    }


def prepare(out: Path, bucket: Path) -> subprocess.CompletedProcess:
    env = subprocess_env(**bucket_env(bucket), PYTHON="python3")
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    cmd = ["bash", str(PREPARE), "--outputdir", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_download_places_the_folders_verifies_and_a_rerun_fetches_nothing(tmp_path, bucket):
    out = tmp_path / "flux1"
    proc = prepare(out, bucket)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Flux.1 data OK" in proc.stdout and f"export DATADIR={out}" in proc.stdout
    requests = [Path(r).name for r in (bucket / "requests.log").read_text().split()]
    assert requests == [f"{name}.uri" for name in NAMES.values()]
    for folder, name in NAMES.items():  # as the downloader left them, linked where the trainer reads them
        assert (out / folder).is_symlink() and (out / folder).resolve() == (out / name / folder).resolve()
    proc = prepare(out, bucket)
    assert proc.returncode == 0 and "already verified; nothing to download" in proc.stdout
    assert len((bucket / "requests.log").read_text().split()) == 3


def test_the_free_disk_is_checked_before_anything_is_fetched(tmp_path, bucket, monkeypatch):
    from input_preprocessing.common import runtime

    for name, value in bucket_env(bucket).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(runtime.shutil, "disk_usage", lambda _: type("Usage", (), {"free": 2**10})())
    sizes = sum(
        p.stat().st_size
        for name in NAMES.values()
        for p in (bucket / name).rglob("*")
        if p.is_file() and p.suffix != ".md5"
    )
    log = bucket / "requests.log"
    before = log.read_text() if log.exists() else ""
    with pytest.raises(PrepError, match=rf"about {sizes:,} bytes needed .* \(cc12m_preprocessed: the bucket"):
        download.download(tmp_path / "out")
    assert (log.read_text() if log.exists() else "") == before  # nothing fetched
    # a bucket that does not answer: the sizes the published layout gives, 2.45 TB
    monkeypatch.setenv("CC12M_URI", (tmp_path / "nowhere.uri").as_uri())
    with pytest.raises(PrepError, match="its published layout"):
        download.check_disk(tmp_path / "out")
    assert sum(d[2] for d in download.downloads({})) == 2_445_010_798_336


def test_a_folder_the_download_did_not_bring_is_named(tmp_path):
    (tmp_path / layout.TRAIN).mkdir()
    (tmp_path / "a" / layout.VALID).mkdir(parents=True)
    (tmp_path / "b" / layout.VALID).mkdir(parents=True)
    with pytest.raises(PrepError, match=r"coco_preprocessed/ is found .*a/coco_preprocessed, .*b/coco_prep"):
        download.place(tmp_path)


def test_help_is_the_comment_block_at_the_top():
    proc = subprocess.run(["bash", str(PREPARE), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("Flux.1 data. Usage")
