"""Downloads through MLCommons' R2 downloader, with a local stand-in for the script and its bucket (no network
here): placement and the published-MD5 check, resume, corrupt files, byte progress in a log, the pipeline end
to end on the MLCommons layout."""

import hashlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from input_preprocessing.bert import download
from input_preprocessing.common.runtime import PrepError
from tests.bert_data.helpers import REPO, VOCAB, data_digests, prepare, write_text_dir

FIXTURE = REPO / "tests" / "data"
METADATA = "https://r2.invalid/metadata"  # never contacted: the stand-in reads $FAKE_BUCKET

# Stands in for mlc-r2-downloader.sh with its command line (`-d DIR <metadata>/<name>.uri`) and what matters
# here: the dataset's md5 list copied into DIR, each listed file fetched like wget --continue (a partial file
# is completed from its end, a complete one kept; a "Length:" line per file fetched), then `md5sum -c`.
# "Fetching" copies from $FAKE_BUCKET/<name>/, $FAKE_CHUNK bytes every $FAKE_DELAY s when FAKE_CHUNK is set,
# dropping the connection after $FAKE_FAIL_AFTER chunks when that is set.
FAKE_DOWNLOADER = r"""#!/usr/bin/env bash
set -euo pipefail
while getopts "d:" opt; do case $opt in d) dir=$OPTARG ;; *) exit 1 ;; esac; done
shift $((OPTIND - 1))
name=$(basename -s .uri "$1")
src=$FAKE_BUCKET/$name
echo "$1" >> "$FAKE_BUCKET/requests.log"
mkdir -p "$dir"
cp "$src/$name.md5" "$dir/"
fetch() {
  local from=$1 to=$2 have=$3 size=$4 chunk=${FAKE_CHUNK:-$4} n=0
  while ((have < size)); do
    if [[ -n ${FAKE_FAIL_AFTER:-} ]] && ((n == FAKE_FAIL_AFTER)); then echo "Connection reset" >&2; exit 4; fi
    dd if="$from" of="$to" iflag=skip_bytes,count_bytes skip="$have" count="$chunk" oflag=append \
      conv=notrunc status=none
    have=$(stat -c %s "$to"); n=$((n + 1)); sleep "${FAKE_DELAY:-0}"
  done
}
sed 's/^[a-f0-9]\{32\}[[:space:]]*//; s,^\./,,' "$dir/$name.md5" | while read -r f; do
  size=$(stat -c %s "$src/$f") have=0
  [[ -f $dir/$f ]] && have=$(stat -c %s "$dir/$f")
  if ((have >= size)); then echo "The file is already fully retrieved; nothing to do."; continue; fi
  ((have == 0)) || echo "resume $f at $have" >> "$FAKE_BUCKET/requests.log"
  echo "Length: $size ($((size >> 10))K), $((size - have)) remaining [application/octet-stream]"
  mkdir -p "$(dirname "$dir/$f")"
  fetch "$src/$f" "$dir/$f" "$have" "$size"
done
(cd "$dir" && md5sum -c "$name.md5") || { echo "Error: Hash verification failed" >&2; exit 1; }
"""


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def publish(bucket: Path, dataset: str, files: dict[str, Path | bytes]) -> None:
    """A dataset as MLCommons' bucket holds it: the files under <dataset>/ and <dataset>.md5 listing them."""
    lines = []
    for rel, src in files.items():
        data = src if isinstance(src, bytes) else src.read_bytes()
        (bucket / dataset / rel).parent.mkdir(parents=True, exist_ok=True)
        (bucket / dataset / rel).write_bytes(data)
        lines.append(f"{md5(data)}  ./{rel}")
    (bucket / dataset / f"{dataset}.md5").write_text("\n".join(lines) + "\n")


@pytest.fixture
def bucket(tmp_path, articles, monkeypatch) -> Path:
    """MLCommons' two BERT datasets in small: the tiny TF1 checkpoint fixture and its config, the real
    vocabulary, files the pipeline does not use, and two text parts with an eval file."""
    root = tmp_path / "bucket"
    text = write_text_dir(tmp_path / "text", articles[20:32], parts=2, eval_articles=2)
    ckpt = "model.ckpt-28252"
    inputs = {
        "bert_config.json": FIXTURE / "tf1_bert_tiny_config.json",
        "vocab.txt": VOCAB,
        f"tf1_ckpt/{ckpt}.index": FIXTURE / "tf1_bert_tiny.ckpt.index",
        f"tf1_ckpt/{ckpt}.data-00000-of-00001": FIXTURE / "tf1_bert_tiny.ckpt.data-00000-of-00001",
        f"tf2_ckpt/{ckpt}.index": FIXTURE
        / "tf1_bert_tiny.ckpt.index",  # not used: removed after the download
        "License.txt": b"license\n",
    }
    publish(root, download.INPUT_DATASET, inputs)
    publish(root, download.TEXT_DATASET, {f"results/{p.name}": p for p in sorted(text.iterdir())})
    (root / "downloader.sh").write_text(FAKE_DOWNLOADER)
    monkeypatch.setenv("FAKE_BUCKET", str(root))
    monkeypatch.setenv("R2_DOWNLOADER", str(root / "downloader.sh"))
    return root


def requests(bucket: Path) -> list[str]:
    log = bucket / "requests.log"
    return log.read_text().splitlines() if log.exists() else []


def run(bucket: Path, dataset: str, folder: Path, **kwargs) -> None:
    download.run_r2_downloader(
        bucket / "downloader.sh", f"{METADATA}/{dataset}.uri", folder, folder.parent / "dl.log", **kwargs
    )


def test_download_places_the_files_used_and_removes_the_rest(bucket, tmp_path, monkeypatch):
    monkeypatch.setattr(download, "PUBLISHED_MD5", {})  # the tiny checkpoint is not MLPerf's
    root = tmp_path / "out"
    stats = download.download_inputs(root, METADATA, bucket / "downloader.sh")
    assert sorted(p.name for p in (root / "phase1").iterdir()) == [
        "bert_config.json",
        "model.ckpt-28252.data-00000-of-00001",
        "model.ckpt-28252.index",
        "vocab.txt",
    ]
    assert sorted(p.name for p in (root / "download").iterdir()) == ["results4"]  # dataset folders gone
    assert stats["text_parts"] == 2
    assert (root / "phase1" / "vocab.txt").read_bytes() == VOCAB.read_bytes()
    assert [Path(r).name for r in requests(bucket)] == [
        f"{download.INPUT_DATASET}.uri",
        f"{download.TEXT_DATASET}.uri",
    ]
    # In place and checked: nothing is fetched again, the files are not hashed again either.
    verified = json.loads((root / ".prep" / "verified.json").read_text())
    assert "download/results4/part-00001-of-00002" in verified
    download.download_inputs(root, METADATA, bucket / "downloader.sh")
    assert len(requests(bucket)) == 2
    # A missing text part brings back the text dataset only.
    (root / "download/results4/part-00001-of-00002").unlink()
    download.download_inputs(root, METADATA, bucket / "downloader.sh")
    assert [Path(r).name for r in requests(bucket)[2:]] == [f"{download.TEXT_DATASET}.uri"]


def test_a_listing_that_disagrees_with_the_published_md5_is_upstream_changed(bucket, tmp_path):
    with pytest.raises(PrepError, match="upstream changed: bert-input-files lists md5 .* bert_config.json"):
        download.download_inputs(tmp_path, METADATA, bucket / "downloader.sh")


def test_an_interrupted_download_resumes_where_it_stopped(bucket, tmp_path, monkeypatch):
    payload = np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    publish(bucket, "big", {"big.bin": payload})
    folder = tmp_path / "dl" / "big"
    monkeypatch.setenv("FAKE_CHUNK", "100000")
    monkeypatch.setenv("FAKE_FAIL_AFTER", "2")
    with pytest.raises(PrepError, match=r"R2 downloader failed for big \(exit 4\); run again to resume"):
        run(bucket, "big", folder, stream=io.StringIO())
    assert (folder / "big.bin").stat().st_size == 200_000
    monkeypatch.delenv("FAKE_FAIL_AFTER")
    run(bucket, "big", folder, stream=io.StringIO())
    assert (folder / "big.bin").read_bytes() == payload
    assert "resume big.bin at 200000" in requests(bucket)


def test_a_corrupt_file_is_set_aside_so_that_a_rerun_fetches_it_again(bucket, tmp_path):
    publish(bucket, "bad", {"a.txt": b"right\n"})
    (bucket / "bad" / "a.txt").write_bytes(b"wrong\n")  # the bucket serves other bytes than it lists
    folder = tmp_path / "dl" / "bad"
    with pytest.raises(PrepError, match=r"1 file\(s\) failed their md5 check, renamed \*.corrupt"):
        run(bucket, "bad", folder, stream=io.StringIO())
    assert not (folder / "a.txt").exists() and (folder / "a.txt.corrupt").read_bytes() == b"wrong\n"


def test_progress_is_shown_in_bytes_also_in_a_log(bucket, tmp_path, monkeypatch):
    publish(bucket, "slow", {"one.bin": bytes(400_000), "two.bin": bytes(100_000)})
    monkeypatch.setenv("FAKE_CHUNK", "100000")
    monkeypatch.setenv("FAKE_DELAY", "0.3")
    stream = io.StringIO()  # not a terminal: plain lines
    run(bucket, "slow", tmp_path / "dl" / "slow", stream=stream, poll_seconds=0.1, log_every=0.25)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3, lines
    assert all(line.startswith("[download slow]") and " MB/s" in line for line in lines)
    assert any(" MB of ~0.8 MB" in line for line in lines)  # 2 files started: 400 kB, then 4 x 100 kB
    assert lines[-1].startswith("[download slow] 100.0%") and "0.5 MB of 0.5 MB" in lines[-1]
    assert "Length: 400000" in (tmp_path / "dl" / "dl.log").read_text()  # wget's output, kept aside


def test_total_is_estimated_from_the_sizes_announced_so_far():
    assert download._estimated_total(4, [100, 300]) == (800, False)
    assert download._estimated_total(2, [100, 300]) == (400, True)
    assert download._estimated_total(3, []) == (0, False)


def test_the_downloader_is_fetched_when_not_given(tmp_path):
    script = tmp_path / "r2.sh"
    script.write_text("#!/bin/bash\n")
    assert download.fetch_r2_downloader(tmp_path / "got.sh", script.as_uri()).read_text() == "#!/bin/bash\n"
    with pytest.raises(PrepError, match="set R2_DOWNLOADER=/path/to/mlc-r2-downloader.sh"):
        download.fetch_r2_downloader(tmp_path / "x.sh", (tmp_path / "missing.sh").as_uri())


def test_full_pipeline_from_the_mlcommons_layout(bucket, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(download, "PUBLISHED_MD5", {})  # the tiny checkpoint is not MLPerf's
    root = tmp_path / "bert_data"
    args = ["--outputdir", root, "--metadata-url", METADATA, "--packed-data", "--shards", "2"]
    args += ["--eval-samples", "100", "--no-disk-check", "--jobs", "1"]  # the check plans for 330 GB
    assert prepare(*args) == 0, capsys.readouterr().err
    assert "[download bert-input-files] 100.0%" in capsys.readouterr().err
    state = torch.load(root / "phase1" / "model.ckpt-28252.pt")
    assert state["bert.encoder.layer.1.output.dense.weight"].shape == (8, 16)
    manifest = {e["path"] for e in json.loads((root / "manifest.json").read_text())["files"]}
    assert "phase1/model.ckpt-28252.pt" in manifest and "hdf5/packed_data/part_00001" in manifest
    before = data_digests(root)

    # Done is done: a rerun downloads nothing; --skip-download checks what is there.
    assert prepare(*args) == 0
    assert len(requests(bucket)) == 2 and data_digests(root) == before
    (root / "download/results4/part-00001-of-00002").unlink()
    with pytest.raises(PrepError, match="part-00001-of-00002"):
        download.check_inputs(root)


def test_free_disk_check_runs_before_anything_is_fetched(bucket, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(
        shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**12, 10**12 - 2**30, 2**30)
    )
    assert prepare("--outputdir", tmp_path / "bert_data", "--metadata-url", METADATA, "--packed-data") == 1
    assert "not enough free disk under" in capsys.readouterr().err
    assert requests(bucket) == []
