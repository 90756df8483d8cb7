"""Download MLCommons' BERT inputs, resumably, each file checked against its published MD5.

Two mirrors publish the same files:
- `mlcommons` (default): MLCommons' Cloudflare R2 bucket, the current official source. A dataset is named by
  `<metadata>/<name>.uri` (a text file holding the dataset's base URL) and `<metadata>/<name>.md5` (one
  `md5  relative/path` line per file), as read by MLCommons' `mlc-r2-downloader.sh`. We use
  `bert-input-files` (bert_config.json, vocab.txt, tf1_ckpt/model.ckpt-28252.*) and
  `bert-preprocessed-wikipedia-dataset` (the 500 text parts and eval.txt).
- `gdrive`: the Google Drive files NVIDIA's `prepare_data.sh` fetches (the text as `results_text.tar.gz` with
  its md5 list `bert_reference_results_text_md5.txt`).
On top of the mirror's own checksums, the MD5s that MLCommons publishes in the BERT reference's
`dataset.md` are pinned below: a mirror that disagrees with them is reported as "upstream changed".

Layout: `phase1/{bert_config.json,vocab.txt,model.ckpt-28252.*}` and `download/results4/{part-*,eval.txt}`.
A file is fetched to `NAME.part` (resumed with an HTTP Range request after an interruption), checked, then
renamed; a file that fails its check is moved to `NAME.corrupt` and the run stops with both checksums.
Verified files are remembered (size, mtime, md5) in `.prep/verified.json` and not hashed again.
"""

import hashlib
import http.client
import json
import os
import re
import shutil
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .runtime import PrepError, Progress, log, write_json_atomic

MLCOMMONS_METADATA = "https://training.mlcommons-storage.org/metadata"
INPUT_DATASET = "bert-input-files"
TEXT_DATASET = "bert-preprocessed-wikipedia-dataset"
GDRIVE_URL = "https://drive.usercontent.google.com/download?id={}&export=download&confirm=t"
CHECKPOINT = "model.ckpt-28252"
TEXT_DIR = "download/results4"
TEXT_PARTS = 500

# MD5s and sizes published by MLCommons (mlcommons/training, BERT reference dataset.md).
PUBLISHED_MD5 = {
    "bert_config.json": "7f59165e21b7d566db610ff6756c926b",
    "vocab.txt": "64800d5d8528ce344256daf115d4965e",
    f"{CHECKPOINT}.index": "f97de3ae180eb8d479555c939d50d048",
    f"{CHECKPOINT}.meta": "dbd16c731e8a8113bc08eeed0326b8e7",
    f"{CHECKPOINT}.data-00000-of-00001": "50797acd537880bfb5a7ade80d976129",
    "eval.txt": "2a220f790517261547b1b45ed3ada07a",
    "part-00000-of-00500": "a64a7c31eff5cd38ae6d94f7a6229dab",
    "part-00001-of-00500": "549a9ed4f805257245bec936563abfd0",
    "part-00002-of-00500": "1a1366ddfc03aef9d41ce552ee247abf",
    "part-00497-of-00500": "66835aa75d4855f2e678e8f3d73812e9",
    "part-00498-of-00500": "e6d68a7632e9f4aa1a94128cce556dc9",
    "part-00499-of-00500": "b3b087ad24e3770d879a351664cebc5a",
}
PUBLISHED_BYTES = {f"{CHECKPOINT}.data-00000-of-00001": 4_034_713_312, "eval.txt": 32_851_144}
TEXT_BYTES_ESTIMATE = 13_100_000_000  # the 500 parts (about 26.2 MB each)

GDRIVE_FILES = {
    "phase1/bert_config.json": "1fbGClQMi2CoMv7fwrwTC5YYPooQBdcFW",
    "phase1/vocab.txt": "1USK108J6hMM_d27xCHi738qBL8_BT1u1",
    "download/bert_reference_results_text_md5.txt": "1tmMgLwoBvbEJEHXh77sqrXYw5RpqT8R_",
    "download/results_text.tar.gz": "14xV2OUGSQDG_yDBrmbSdcDC-QGeqpfs_",
    f"phase1/{CHECKPOINT}.data-00000-of-00001": "1chiTBljF0Eh1U5pKs6ureVHgSbtU8OG_",
    f"phase1/{CHECKPOINT}.index": "1Q47V3K3jFRkbJ2zGCrKkKk-n0fvMZsa0",
    f"phase1/{CHECKPOINT}.meta": "1vAcVmXSLsLeQ1q7gvHnQUSth5W_f_pwv",
}

_PART = re.compile(r"part-\d{5}-of-(\d{5})")
_ARCHIVE = re.compile(r".*\.(tar\.gz|tgz|tar)")
_USER_AGENT = "mlperf-repro-bert-prep/1"


class ChecksumError(PrepError):
    pass


@dataclass(frozen=True)
class Remote:
    url: str
    dest: str  # relative to the output folder
    md5: str | None


def md5_file(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


class Verified:
    """Files already checked: relative path -> (size, mtime_ns, md5), kept in `.prep/verified.json`."""

    def __init__(self, root: Path):
        self.root = root
        self.path = root / ".prep" / "verified.json"
        self.entries: dict[str, list] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def md5(self, rel: str) -> str:
        """The file's md5, from the record when size and mtime still match, else computed (and recorded)."""
        st = (self.root / rel).stat()
        rec = self.entries.get(rel)
        if rec and rec[0] == st.st_size and rec[1] == st.st_mtime_ns:
            return rec[2]
        digest = md5_file(self.root / rel)
        self.record(rel, digest)
        return digest

    def record(self, rel: str, digest: str) -> None:
        st = (self.root / rel).stat()
        self.entries[rel] = [st.st_size, st.st_mtime_ns, digest]
        write_json_atomic(self.path, self.entries)


def _open(url: str, timeout: float, headers: dict | None = None):
    req = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT, **(headers or {})})
    resp = urllib.request.urlopen(req, timeout=timeout)
    host = urllib.parse.urlparse(resp.geturl()).hostname or ""
    if host.endswith("cloudflareaccess.com"):
        resp.close()
        raise PrepError(
            f"{url} asks for an MLCommons login (Cloudflare Access). Fetch the files with MLCommons' "
            f"mlc-r2-downloader.sh into <outputdir>/phase1 and <outputdir>/{TEXT_DIR}, "
            "then rerun with --skip-download"
        )
    return resp


def fetch_text(url: str, retries: int = 5, timeout: float = 60) -> str:
    for attempt in range(retries):
        try:
            with _open(url, timeout) as resp:
                return resp.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            raise PrepError(f"{url}: HTTP {e.code} {e.reason}") from e
        except (OSError, http.client.HTTPException) as e:
            if attempt == retries - 1:
                raise PrepError(f"{url}: {e} (after {retries} tries)") from e
            time.sleep(min(30, 2**attempt))
    raise AssertionError("unreachable")


def _fetch_once(url: str, part: Path, timeout: float) -> None:
    have = part.stat().st_size if part.exists() else 0
    if url.startswith("file:"):
        src = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
        with open(src, "rb") as fin, open(part, "ab") as fout:
            fin.seek(have)
            shutil.copyfileobj(fin, fout, 1 << 22)
        return
    try:
        resp = _open(url, timeout, {"Range": f"bytes={have}-"} if have else None)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing left to send: the partial file is complete
            return
        raise
    with resp:
        if have and resp.status != 206:  # the server ignored the range: start over
            have = 0
        expected = resp.headers.get("Content-Length")
        received = 0
        with open(part, "ab" if have else "wb") as f:
            while chunk := resp.read(1 << 22):
                f.write(chunk)
                received += len(chunk)
        if expected is not None and received < int(expected):
            raise http.client.IncompleteRead(b"", int(expected) - received)


def fetch(url: str, dest: Path, md5: str | None, retries: int = 6, timeout: float = 60) -> str:
    """Download `url` to `dest` (resuming `dest.part`), check `md5` when given; returns the file's md5."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    for attempt in range(retries):
        try:
            _fetch_once(url, part, timeout)
            break
        except urllib.error.HTTPError as e:
            if e.code < 500:
                raise PrepError(f"{url}: HTTP {e.code} {e.reason} (for {dest})") from e
            error: Exception = e
        except (OSError, http.client.HTTPException) as e:
            error = e
        if attempt == retries - 1:
            raise PrepError(
                f"download of {url} to {dest} failed after {retries} tries: {error}; run again to resume"
            )
        log(f"[download] {dest.name}: {error}; resuming (try {attempt + 2} of {retries})")
        time.sleep(min(30, 2**attempt))
    digest = md5_file(part)
    if md5 and digest != md5:
        corrupt = dest.with_name(dest.name + ".corrupt")
        os.replace(part, corrupt)
        with open(corrupt, "rb") as f:
            looks_html = f.read(512).lstrip().lower().startswith((b"<!doctype html", b"<html"))
        hint = " (the server sent a web page, not the file: quota or access problem)" if looks_html else ""
        raise ChecksumError(
            f"{dest}: md5 {digest} does not match the published {md5}{hint}; the download was moved to "
            f"{corrupt.name}; run again to download it afresh"
        )
    os.replace(part, dest)
    return digest


def _parse_md5_list(text: str, source: str) -> list[tuple[str, str]]:
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = re.fullmatch(r"([0-9a-fA-F]{32})\s+\*?(?:\./)?(.+?)\s*", line)
        if not m:
            raise PrepError(f"{source}: not an md5 list line: {line!r}")
        out.append((m.group(1).lower(), m.group(2)))
    return out


def _dest_for(rel: str) -> str | None:
    """Where a file of an MLCommons dataset goes, or None if the pipeline does not need it."""
    parts = rel.split("/")
    base = parts[-1]
    if base in ("bert_config.json", "vocab.txt") and not any("tf2" in p for p in parts):
        return f"phase1/{base}"
    if base.startswith(f"{CHECKPOINT}.") and "tf1_ckpt" in parts:
        return f"phase1/{base}"
    if _PART.fullmatch(base) or base == "eval.txt":
        return f"{TEXT_DIR}/{base}"
    if _ARCHIVE.fullmatch(base) or base.endswith("md5.txt"):
        return f"download/{base}"
    return None


def mlcommons_files(metadata_url: str) -> list[Remote]:
    """The files to fetch from MLCommons' R2 bucket, with their checksums, from the datasets' metadata."""
    remotes: list[Remote] = []
    for dataset in (INPUT_DATASET, TEXT_DATASET):
        base = fetch_text(f"{metadata_url}/{dataset}.uri").strip().rstrip("/")
        listing = _parse_md5_list(
            fetch_text(f"{metadata_url}/{dataset}.md5"), f"{metadata_url}/{dataset}.md5"
        )
        for md5, rel in listing:
            dest = _dest_for(rel)
            if dest and dest not in {r.dest for r in remotes}:
                remotes.append(Remote(f"{base}/{urllib.parse.quote(rel)}", dest, md5))
    return remotes


def gdrive_files() -> list[Remote]:
    return [
        Remote(GDRIVE_URL.format(fid), dest, PUBLISHED_MD5.get(Path(dest).name))
        for dest, fid in GDRIVE_FILES.items()
    ]


def _check_against_published(remotes: list[Remote], source: str) -> None:
    for r in remotes:
        published = PUBLISHED_MD5.get(Path(r.dest).name)
        if published and r.md5 and r.md5 != published:
            raise PrepError(
                f"upstream changed: {source} lists md5 {r.md5} for {r.dest}, MLCommons published "
                f"{published}; the data set is not the one MLPerf results were produced with"
            )
    dests = {r.dest for r in remotes}
    needed = [f"phase1/{n}" for n in ("bert_config.json", "vocab.txt", f"{CHECKPOINT}.index")]
    needed.append(f"phase1/{CHECKPOINT}.data-00000-of-00001")
    has_text = f"{TEXT_DIR}/eval.txt" in dests or any(_ARCHIVE.fullmatch(Path(d).name) for d in dests)
    missing = [n for n in needed if n not in dests] + ([] if has_text else [f"{TEXT_DIR}/*"])
    if missing:
        raise PrepError(f"{source} does not list: {', '.join(missing)}")


def _extract_text_archives(root: Path, verified: Verified) -> None:
    """Unpack a text archive (Drive layout: results4/ inside) into download/, then check it against the md5
    list that comes with it."""
    download = root / "download"
    for archive in sorted(p for p in download.iterdir() if _ARCHIVE.fullmatch(p.name)):
        marker = root / ".prep" / f"extracted-{archive.name}"
        if marker.exists():
            continue
        log(f"[download] unpacking {archive.name}")
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                target = (download / member.name).resolve()
                if not target.is_relative_to(download.resolve()) or member.issym() or member.islnk():
                    raise PrepError(
                        f"{archive}: refusing member {member.name!r} (outside download/ or a link)"
                    )
            if hasattr(tarfile, "data_filter"):  # Python >= 3.12 and patched 3.10/3.11
                tar.extractall(download, filter="data")
            else:
                tar.extractall(download)
        marker.write_text("done\n")
    for md5_list in sorted(download.glob("*md5.txt")):
        text_dir = root / TEXT_DIR
        for md5, name in _parse_md5_list(md5_list.read_text(), str(md5_list)):
            rel = f"{TEXT_DIR}/{Path(name).name}"
            if not (root / rel).exists():
                raise PrepError(f"{md5_list.name} lists {name}, missing from {text_dir}")
            got = verified.md5(rel)
            if got != md5:
                raise ChecksumError(f"{root / rel}: md5 {got} does not match {md5} from {md5_list.name}")


def check_inputs(root: Path, verified: Verified | None = None) -> dict:
    """Check that the downloaded inputs are all there and match the published MD5s (for --skip-download)."""
    verified = verified or Verified(root)
    phase1 = [f"phase1/{n}" for n in ("bert_config.json", "vocab.txt", f"{CHECKPOINT}.index")]
    phase1.append(f"phase1/{CHECKPOINT}.data-00000-of-00001")
    # The part count is in the names (part-00000-of-00500); MLCommons' text has 500 parts.
    found = sorted((root / TEXT_DIR).glob("part-*-of-*")) if (root / TEXT_DIR).is_dir() else []
    n_parts = int(_PART.fullmatch(found[0].name).group(1)) if found else TEXT_PARTS
    text = [f"{TEXT_DIR}/eval.txt"] + [f"{TEXT_DIR}/part-{k:05d}-of-{n_parts:05d}" for k in range(n_parts)]
    missing = [rel for rel in phase1 + text if not (root / rel).exists()]
    if missing:
        raise PrepError(
            f"inputs missing under {root}: {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}; "
            "run without --skip-download to fetch them"
        )
    for rel in phase1 + text:
        published = PUBLISHED_MD5.get(Path(rel).name)
        if published and verified.md5(rel) != published:
            raise ChecksumError(
                f"{root / rel}: md5 {verified.md5(rel)} does not match the published {published}"
            )
    return {"text_parts": n_parts, "text_bytes": sum((root / rel).stat().st_size for rel in text[1:])}


def download_inputs(
    root: Path, mirror: str, metadata_url: str = MLCOMMONS_METADATA, threads: int = 4
) -> dict:
    """Fetch whatever is missing, check everything, unpack a text archive; returns input statistics."""
    if mirror == "mlcommons":
        remotes = mlcommons_files(metadata_url)
        source = f"{metadata_url} ({INPUT_DATASET}, {TEXT_DATASET})"
    elif mirror == "gdrive":
        remotes, source = gdrive_files(), "Google Drive (NVIDIA's file ids)"
    else:
        raise PrepError(f"--mirror {mirror}: expected mlcommons or gdrive")
    _check_against_published(remotes, source)
    verified = Verified(root)
    todo = []
    for r in remotes:
        if (root / r.dest).exists() and (r.md5 is None or verified.md5(r.dest) == r.md5):
            continue
        todo.append(r)
    present = len(remotes) - len(todo)
    log(f"[download] {present} of {len(remotes)} files present and verified; fetching {len(todo)}")
    progress = Progress("download", len(todo), "files")

    def one(r: Remote) -> tuple[str, str]:
        if (root / r.dest).exists():  # present but not matching: keep it aside, fetch again
            os.replace(root / r.dest, root / f"{r.dest}.corrupt")
        return r.dest, fetch(r.url, root / r.dest, r.md5)

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        for dest, digest in pool.map(one, todo):
            verified.record(dest, digest)
            progress.advance()
    _extract_text_archives(root, verified)
    return check_inputs(root, verified)
