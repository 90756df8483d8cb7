"""Downloads through MLCommons' R2 downloader, with a local stand-in for the script and its bucket (no network
here): placement and the published-MD5 check, resume, corrupt files, byte progress in a log, the pipeline end
to end on the MLCommons layout."""

import hashlib
import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from input_preprocessing.bert import download, verify
from input_preprocessing.bert import prepare as prepare_module
from input_preprocessing.common import r2
from input_preprocessing.common.runtime import PrepError
from tests.bert_data.helpers import REPO, VOCAB, data_digests, prepare, write_text_dir

FIXTURE = REPO / "tests" / "data"
METADATA = "https://r2.invalid/metadata"  # never contacted: the stand-in reads $FAKE_BUCKET
TEXT_ARCHIVES = download.TEXT_ARCHIVES

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
    """A dataset as MLCommons' bucket holds it: the files under <dataset>/, <dataset>.md5 listing them, and in
    metadata/ the `.uri` (the dataset's base URL) and a copy of the list, as the R2 downloader reads them."""
    lines = []
    for rel, src in files.items():
        data = src if isinstance(src, bytes) else src.read_bytes()
        (bucket / dataset / rel).parent.mkdir(parents=True, exist_ok=True)
        (bucket / dataset / rel).write_bytes(data)
        lines.append(f"{md5(data)}  ./{rel}")
    (bucket / dataset / f"{dataset}.md5").write_text("\n".join(lines) + "\n")
    (bucket / "metadata").mkdir(exist_ok=True)
    (bucket / "metadata" / f"{dataset}.uri").write_text((bucket / dataset).as_uri() + "\n")
    shutil.copyfile(bucket / dataset / f"{dataset}.md5", bucket / "metadata" / f"{dataset}.md5")


def text_archive(name: str, files: dict[str, bytes]) -> bytes:
    """`results_text.tar.gz` or `.zip` as MLCommons publishes it: every file under `results4/`."""
    out = io.BytesIO()
    if name.endswith(".zip"):
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
            for member, data in files.items():
                zf.writestr(f"results4/{member}", data)
    else:
        with tarfile.open(fileobj=out, mode="w:gz") as tf:
            for member, data in files.items():
                info = tarfile.TarInfo(f"results4/{member}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return out.getvalue()


def publish_text(bucket: Path, text: dict[str, bytes], archives=TEXT_ARCHIVES, listed=None, md5_list=True):
    """The text dataset in MLCommons' archive form: `archives` of `text` (the files' names and bytes),
    and NVIDIA's md5 list of them (`listed`: its contents instead, when given)."""
    shutil.rmtree(bucket / download.TEXT_DATASET, ignore_errors=True)
    listed = text if listed is None else listed
    files = {name: text_archive(name, text) for name in archives}
    if md5_list:
        names = "".join(f"{md5(data)}  {member}\n" for member, data in sorted(listed.items()))
        files[download.TEXT_MD5_LIST] = names.encode()
    publish(bucket, download.TEXT_DATASET, files)


@pytest.fixture(scope="module")
def text(tmp_path_factory, articles) -> dict[str, bytes]:
    """Two text parts, an eval file and its md5 list, as results4/ holds them."""
    folder = write_text_dir(tmp_path_factory.mktemp("text"), articles[20:32], parts=2, eval_articles=2)
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    return {**files, "eval.md5": md5(files["eval.txt"]).encode() + b"\n"}


@pytest.fixture
def bucket(tmp_path, text, monkeypatch) -> Path:
    """MLCommons' two BERT datasets in small: the tiny TF1 checkpoint fixture and its config, the real
    vocabulary, files the pipeline does not use, and the text archives with their md5 list."""
    root = tmp_path / "bucket"
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
    publish_text(root, text)
    (root / "downloader.sh").write_text(FAKE_DOWNLOADER)
    monkeypatch.setenv("FAKE_BUCKET", str(root))
    monkeypatch.setenv("R2_DOWNLOADER", str(root / "downloader.sh"))
    return root


def metadata(bucket: Path) -> str:
    return (bucket / "metadata").as_uri()


def requests(bucket: Path) -> list[str]:
    log = bucket / "requests.log"
    return log.read_text().splitlines() if log.exists() else []


def run(bucket: Path, dataset: str, folder: Path, **kwargs) -> None:
    download.run_r2_downloader(
        bucket / "downloader.sh",
        f"{metadata(bucket)}/{dataset}.uri",
        folder,
        folder.parent / "dl.log",
        **kwargs,
    )


def test_download_places_the_files_used_and_removes_the_rest(bucket, tmp_path, monkeypatch):
    monkeypatch.setattr(download, "PUBLISHED_MD5", {})  # the tiny checkpoint is not MLPerf's
    root = tmp_path / "out"
    stats = download.download_inputs(root, metadata(bucket), bucket / "downloader.sh")
    assert sorted(p.name for p in (root / "phase1").iterdir()) == [
        "bert_config.json",
        "model.ckpt-28252.data-00000-of-00001",
        "model.ckpt-28252.index",
        "vocab.txt",
    ]
    # NVIDIA's download/ layout: results4/ unpacked from the archive, the md5 list beside it; the dataset
    # folders (the archives, the unused inputs) gone.
    assert sorted(p.name for p in (root / "download").iterdir()) == [download.TEXT_MD5_LIST, "results4"]
    assert sorted(p.name for p in (root / download.TEXT_DIR).iterdir()) == [
        "eval.md5",
        "eval.txt",
        "part-00000-of-00002",
        "part-00001-of-00002",
    ]
    assert stats["text_parts"] == 2
    assert (root / "phase1" / "vocab.txt").read_bytes() == VOCAB.read_bytes()
    assert [Path(r).name for r in requests(bucket)] == [
        f"{download.INPUT_DATASET}.uri",
        f"{download.TEXT_DATASET}.uri",
    ]
    # In place and checked: nothing is fetched again, the files are not hashed again either.
    verified = json.loads((root / ".prep" / "verified.json").read_text())
    assert "download/results4/part-00001-of-00002" in verified
    download.download_inputs(root, metadata(bucket), bucket / "downloader.sh")
    assert len(requests(bucket)) == 2
    # A missing text part brings back the text dataset only.
    (root / "download/results4/part-00001-of-00002").unlink()
    download.download_inputs(root, metadata(bucket), bucket / "downloader.sh")
    assert [Path(r).name for r in requests(bucket)[2:]] == [f"{download.TEXT_DATASET}.uri"]


@pytest.mark.parametrize("archive", TEXT_ARCHIVES)
def test_either_archive_is_unpacked_and_checked(bucket, tmp_path, text, monkeypatch, archive):
    monkeypatch.setattr(download, "PUBLISHED_MD5", {})
    publish_text(bucket, text, archives=(archive,))
    root = tmp_path / "out"
    download.download_inputs(root, metadata(bucket), bucket / "downloader.sh")
    assert {p.name: p.read_bytes() for p in (root / download.TEXT_DIR).iterdir()} == text


def test_a_corrupt_part_is_refused_by_name_and_set_aside(bucket, tmp_path, text, monkeypatch):
    """The archive's part-00001 is not what MLCommons' md5 list says: refused, naming it (and only it), and
    set aside so that it is unpacked again; with a good archive in place the rerun finishes, leaving nothing
    of the bad one."""
    monkeypatch.setattr(download, "PUBLISHED_MD5", {})
    bad = {**text, "part-00001-of-00002": text["part-00001-of-00002"].replace(b"the", b"teh", 1)}
    publish_text(bucket, bad, listed=text)
    root = tmp_path / "out"
    part = root / download.TEXT_DIR / "part-00001-of-00002"
    with pytest.raises(download.ChecksumError) as err:
        download.download_inputs(root, metadata(bucket), bucket / "downloader.sh")
    listed, got = md5(text[part.name]), md5(bad[part.name])
    assert f"{part}: md5 {got}, {download.TEXT_MD5_LIST} says {listed} (corrupt)" in str(err.value)
    assert "part-00000-of-00002" not in str(err.value)
    assert not part.exists() and part.with_name(part.name + ".corrupt").read_bytes() == bad[part.name]
    publish_text(bucket, text)
    shutil.rmtree(root / "download" / download.TEXT_DATASET)  # the bad archive, downloaded again
    download.download_inputs(root, metadata(bucket), bucket / "downloader.sh")
    assert {p.name: p.read_bytes() for p in (root / download.TEXT_DIR).iterdir()} == text


def test_a_part_that_is_not_the_one_mlcommons_published_is_upstream_changed(
    bucket, tmp_path, text, monkeypatch
):
    """The list and the archive agree with each other, but not with the MD5 MLCommons published."""
    monkeypatch.setattr(download, "PUBLISHED_MD5", {"part-00000-of-00002": "0" * 32})
    with pytest.raises(
        PrepError,
        match=r"upstream changed: .*bert_reference_results_text_md5.txt disagrees"
        r" with the MD5s MLCommons published \(part-00000-of-00002: listed [0-9a-f]{32}, "
        r"published 0{32}\)",
    ):
        download.download_inputs(tmp_path / "out", metadata(bucket), bucket / "downloader.sh")


def test_the_md5_list_is_required_and_may_be_put_in_place(bucket, tmp_path, text, monkeypatch):
    monkeypatch.setattr(download, "PUBLISHED_MD5", {})
    publish_text(bucket, text, md5_list=False)
    root = tmp_path / "out"
    with pytest.raises(PrepError, match=f"holds no {download.TEXT_MD5_LIST} .*put a copy there"):
        download.download_inputs(root, metadata(bucket), bucket / "downloader.sh")
    (root / "download" / download.TEXT_MD5_LIST).write_text(
        "".join(f"{md5(data)}  {name}\n" for name, data in text.items())
    )
    download.download_inputs(root, metadata(bucket), bucket / "downloader.sh")
    assert (root / download.TEXT_DIR / "eval.txt").read_bytes() == text["eval.txt"]


def test_a_listing_that_disagrees_with_the_published_md5_is_upstream_changed(bucket, tmp_path):
    with pytest.raises(PrepError, match="upstream changed: bert-input-files lists md5 .* bert_config.json"):
        download.download_inputs(tmp_path, metadata(bucket), bucket / "downloader.sh")


def test_each_download_checks_the_free_disk_against_its_size_first(bucket, tmp_path, monkeypatch):
    """The input dataset's size as the bucket reports it (a HEAD request per listed file), then the text's
    archives plus the unpacked text; refused naming the folder, the free and the needed bytes; nothing
    fetched."""
    monkeypatch.setattr(download, "PUBLISHED_MD5", {})
    free = {"bytes": 1000}
    monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**12, 0, free["bytes"]))
    root = tmp_path / "out"
    inputs = sum(p.stat().st_size for p in (bucket / download.INPUT_DATASET).rglob("*") if p.is_file())
    inputs -= (bucket / download.INPUT_DATASET / f"{download.INPUT_DATASET}.md5").stat().st_size
    with pytest.raises(PrepError) as err:
        download.download_inputs(root, metadata(bucket), bucket / "downloader.sh")
    assert str(err.value).startswith(
        f"not enough free disk under {root}: 1,000 bytes free (0.0 GiB), about {inputs:,} bytes needed"
    )
    assert "the bert-input-files download, the sizes the bucket reports" in str(err.value)
    assert requests(bucket) == []
    free["bytes"] = inputs  # enough for the inputs, not for the text archives and the unpacked text
    with pytest.raises(PrepError, match=r"\(.* GiB\) for the bert-preprocessed-wikipedia-dataset download"):
        download.download_inputs(root, metadata(bucket), bucket / "downloader.sh")
    assert [Path(r).name for r in requests(bucket)] == [f"{download.INPUT_DATASET}.uri"]
    assert r2.remote_bytes(f"{metadata(bucket)}/missing.uri") is None  # no answer: the published figure


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


def test_full_pipeline_from_the_mlcommons_layout(bucket, tmp_path, monkeypatch, capsys):
    """MLCommons' datasets to packed shards. The eval set is checked against NVIDIA's published digest:
    the stand-in text's is another, so the first run stops at the eval stage, naming both; with the
    expected digest set to this text's, the rerun resumes there and finishes."""
    monkeypatch.setattr(download, "PUBLISHED_MD5", {})  # the tiny checkpoint is not MLPerf's
    monkeypatch.setattr(verify, "MLCOMMONS_EVAL_SAMPLES", 100)  # what the check applies to, here
    monkeypatch.setattr(prepare_module, "MLCOMMONS_EVAL_SAMPLES", 100)
    root = tmp_path / "bert_data"
    args = ["--outputdir", root, "--metadata-url", metadata(bucket), "--packed-data", "--shards", "2"]
    args += ["--eval-samples", "100", "--no-disk-check", "--jobs", "1"]  # the check plans for 330 GB
    assert prepare(*args) == 1
    err = capsys.readouterr().err
    assert "[download bert-input-files] 100.0%" in err
    eval_file = root / verify.EVAL_FILE
    digest = verify.nvidia_hdf5_md5(eval_file)
    assert (
        f"{eval_file}: not MLPerf's eval set: its digest by NVIDIA's hdf5_md5.py method is {digest}, NVIDIA "
        f"publishes {verify.NVIDIA_EVAL_MD5} (eval_varlength.chk)" in err
    )
    monkeypatch.setattr(verify, "NVIDIA_EVAL_MD5", digest)
    assert prepare(*args) == 0, capsys.readouterr().err
    assert "[examples] already done, skipping" in capsys.readouterr().err
    state = torch.load(root / "phase1" / "model.ckpt-28252.pt")["model"]
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
