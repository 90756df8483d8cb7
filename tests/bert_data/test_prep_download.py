"""Downloads: resume after an interruption, checksum errors, and the MLCommons R2 layout end to end, against
a file server on 127.0.0.1 (no other network is used)."""

import hashlib
import http.server
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from input_preprocessing.bert import download
from input_preprocessing.bert.runtime import PrepError
from tests.bert_data.helpers import REPO, VOCAB, data_digests, prepare, write_text_dir

FIXTURE = REPO / "tests" / "data"


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with `Range: bytes=N-` support; paths in `cut_once` send half the body once, then drop."""

    cut_once: set[str] = set()
    requests: list[tuple[str, str | None]] = []

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        RangeHandler.requests.append((self.path, self.headers.get("Range")))
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = int(self.headers["Range"].split("=")[1].rstrip("-")) if self.headers.get("Range") else 0
        if start >= len(data) and start:
            self.send_error(416)
            return
        body = data[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.path in RangeHandler.cut_once:
            RangeHandler.cut_once.discard(self.path)
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    RangeHandler.requests = []
    RangeHandler.cut_once = set()
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: RangeHandler(*a, directory=str(root))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def test_download_resumes_after_a_dropped_connection(server, tmp_path):
    www, url = server
    payload = np.random.default_rng(0).integers(0, 256, 3_000_000, dtype=np.uint8).tobytes()
    (www / "big.bin").write_bytes(payload)
    RangeHandler.cut_once = {"/big.bin"}
    dest = tmp_path / "out" / "big.bin"
    assert download.fetch(f"{url}/big.bin", dest, md5(payload)) == md5(payload)
    assert dest.read_bytes() == payload and not dest.with_name("big.bin.part").exists()
    first, second = RangeHandler.requests
    assert first == ("/big.bin", None) and second == ("/big.bin", "bytes=1500000-")


def test_download_continues_a_partial_file_from_an_earlier_run(server, tmp_path):
    www, url = server
    payload = b"0123456789" * 1000
    (www / "f.txt").write_bytes(payload)
    dest = tmp_path / "f.txt"
    dest.with_name("f.txt.part").write_bytes(payload[:4321])
    download.fetch(f"{url}/f.txt", dest, md5(payload))
    assert dest.read_bytes() == payload
    assert RangeHandler.requests == [("/f.txt", "bytes=4321-")]


def test_download_resumes_file_urls_too(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"abcdef" * 100)
    dest = tmp_path / "dest.bin"
    dest.with_name("dest.bin.part").write_bytes(b"abcdef" * 10)
    download.fetch(src.as_uri(), dest, md5(src.read_bytes()))
    assert dest.read_bytes() == src.read_bytes()


def test_checksum_mismatch_is_an_error_naming_the_file(server, tmp_path):
    www, url = server
    (www / "vocab.txt").write_text("not the vocabulary\n")
    dest = tmp_path / "phase1" / "vocab.txt"
    with pytest.raises(
        download.ChecksumError, match=r"phase1/vocab.txt: md5 \w+ does not match the published"
    ):
        download.fetch(f"{url}/vocab.txt", dest, download.PUBLISHED_MD5["vocab.txt"])
    assert not dest.exists() and dest.with_name("vocab.txt.corrupt").read_text() == "not the vocabulary\n"


def test_missing_remote_file_is_an_error(server, tmp_path):
    _, url = server
    with pytest.raises(PrepError, match="HTTP 404"):
        download.fetch(f"{url}/nope", tmp_path / "nope", None)


def publish_r2(www: Path, url: str, files: dict[str, dict[str, Path]]) -> str:
    """Lay out datasets as MLCommons' R2 bucket does: metadata/<name>.uri and .md5, files under <name>/."""
    (www / "metadata").mkdir()
    for dataset, members in files.items():
        lines = []
        for rel, src in members.items():
            (www / dataset / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, www / dataset / rel)
            lines.append(f"{md5(src.read_bytes())}  {rel}")
        (www / "metadata" / f"{dataset}.uri").write_text(f"{url}/{dataset}\n")
        (www / "metadata" / f"{dataset}.md5").write_text("\n".join(lines) + "\n")
    return f"{url}/metadata"


@pytest.fixture
def r2(server, tmp_path, articles):
    """A fake MLCommons bucket: the tiny TF1 checkpoint fixture and its config, the real vocabulary, and
    two small text parts with an eval file."""
    www, url = server
    text = write_text_dir(tmp_path / "text", articles[20:32], parts=2, eval_articles=2)
    ckpt = "model.ckpt-28252"
    inputs = {
        "bert_config.json": FIXTURE / "tf1_bert_tiny_config.json",
        "vocab.txt": VOCAB,
        f"tf1_ckpt/{ckpt}.index": FIXTURE / "tf1_bert_tiny.ckpt.index",
        f"tf1_ckpt/{ckpt}.data-00000-of-00001": FIXTURE / "tf1_bert_tiny.ckpt.data-00000-of-00001",
        f"tf2_ckpt/{ckpt}.index": FIXTURE / "tf1_bert_tiny.ckpt.index",  # not needed: must be skipped
        "License.txt": VOCAB,
    }
    texts = {f"results/{p.name}": p for p in sorted(text.iterdir())}
    metadata = publish_r2(www, url, {download.INPUT_DATASET: inputs, download.TEXT_DATASET: texts})
    return metadata


def test_mlcommons_listing_selects_and_places_the_needed_files(r2):
    remotes = {r.dest: r for r in download.mlcommons_files(r2)}
    assert set(remotes) == {
        "phase1/bert_config.json",
        "phase1/vocab.txt",
        "phase1/model.ckpt-28252.index",
        "phase1/model.ckpt-28252.data-00000-of-00001",
        "download/results4/part-00000-of-00002",
        "download/results4/part-00001-of-00002",
        "download/results4/eval.txt",
    }
    assert remotes["phase1/model.ckpt-28252.index"].url.endswith(
        "/bert-input-files/tf1_ckpt/model.ckpt-28252.index"
    )


def test_a_mirror_that_disagrees_with_the_published_md5_is_refused(r2, tmp_path):
    with pytest.raises(PrepError, match="upstream changed: .* for phase1/bert_config.json"):
        download.download_inputs(tmp_path, "mlcommons", r2)


def test_full_pipeline_from_the_mlcommons_layout(r2, tmp_path, monkeypatch, capsys):
    # The fake bucket holds a tiny checkpoint, not MLPerf's: drop the pinned MD5s, keep the mirror's own.
    monkeypatch.setattr(download, "PUBLISHED_MD5", {})
    root = tmp_path / "bert_data"
    args = [
        "--outputdir",
        root,
        "--metadata-url",
        r2,
        "--packed-data",
        "--shards",
        "2",
        "--eval-samples",
        "100",
        "--no-disk-check",  # the check plans for the full data set's 300 GB
    ]
    assert prepare(*args, "--jobs", "1") == 0, capsys.readouterr().err
    assert (root / "download/results4/eval.txt").is_file()
    state = torch.load(root / "phase1" / "model.ckpt-28252.pt")
    assert state["bert.encoder.layer.1.output.dense.weight"].shape == (8, 16)
    manifest = {e["path"] for e in json.loads((root / "manifest.json").read_text())["files"]}
    assert "phase1/model.ckpt-28252.pt" in manifest and "hdf5/packed_data/part_00001" in manifest
    served = len(RangeHandler.requests)
    before = data_digests(root)

    # Done is done: a rerun downloads nothing; --skip-download checks what is there.
    assert prepare(*args, "--jobs", "1") == 0
    assert len(RangeHandler.requests) == served and data_digests(root) == before
    (root / "download/results4/part-00001-of-00002").unlink()
    with pytest.raises(PrepError, match="part-00001-of-00002"):
        download.check_inputs(root)


def test_free_disk_check_runs_before_anything_is_fetched(r2, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(
        shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**12, 10**12 - 2**30, 2**30)
    )
    assert prepare("--outputdir", tmp_path / "bert_data", "--metadata-url", r2, "--packed-data") == 1
    assert "not enough free disk under" in capsys.readouterr().err
    assert RangeHandler.requests == []


def test_gdrive_mirror_lists_nvidias_files_with_the_published_checksums():
    remotes = {r.dest: r for r in download.gdrive_files()}
    assert remotes["phase1/vocab.txt"].md5 == "64800d5d8528ce344256daf115d4965e"
    assert remotes["download/results_text.tar.gz"].url.startswith("https://drive.usercontent.google.com/")
    download._check_against_published(list(remotes.values()), "gdrive")  # complete and consistent
