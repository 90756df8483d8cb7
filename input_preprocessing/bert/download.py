"""Download MLCommons' BERT inputs with MLCommons' R2 downloader and check them against the published MD5s.

MLCommons publishes the inputs as two datasets of its Cloudflare R2 bucket, each fetched whole by its
`mlc-r2-downloader.sh` (the command MLCommons' BERT README and the Llama preparation use: `-d DIR <name>.uri`;
wget --continue, so a rerun resumes; then every file is checked against the dataset's MD5 list):
- `bert-input-files`: bert_config.json, vocab.txt, tf1_ckpt/model.ckpt-28252.*, and what the pipeline does not
  use (per MLCommons' README, the TF2 checkpoint, 1.3 GB, and the Wikipedia dump the text came from, 17.8 GB);
- `bert-preprocessed-wikipedia-dataset`: the 500 text parts and eval.txt.
Each goes to `download/<dataset>/`. On top of the downloader's own check, the listed MD5s of the files we use
are compared with the ones MLCommons published in the BERT reference's `dataset.md` (pinned below): a
disagreement is reported as "upstream changed". The files we use are then moved to `phase1/` and
`download/results4/` and the dataset folder is removed (with it the files we do not use).

The downloader's own output (wget's, per file) goes to `.prep/download-<dataset>.log`; the user sees one
progress line per dataset instead, in bytes: the bytes written under the dataset folder against the total of
the file sizes wget announces (`Length:`), estimated from their mean for files not started yet.

A dataset whose files are already in place and check out is not downloaded again. Verified files are
remembered (size, mtime, md5) in `.prep/verified.json` and not hashed again.
"""

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import BinaryIO, TextIO

from input_preprocessing.common.checksums import file_hash
from input_preprocessing.common.runtime import PrepError, log, write_json_atomic

from .runtime import ByteProgress

R2_DOWNLOADER_URL = (
    "https://raw.githubusercontent.com/mlcommons/r2-downloader/refs/heads/main/mlc-r2-downloader.sh"
)
MLCOMMONS_METADATA = "https://training.mlcommons-storage.org/metadata"
INPUT_DATASET = "bert-input-files"
TEXT_DATASET = "bert-preprocessed-wikipedia-dataset"
CHECKPOINT = "model.ckpt-28252"
TEXT_DIR = "download/results4"
TEXT_PARTS = 500
PHASE1_FILES = ("bert_config.json", "vocab.txt", f"{CHECKPOINT}.index", f"{CHECKPOINT}.data-00000-of-00001")

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
# The whole bert-input-files dataset as MLCommons' README lists it (TF1 and TF2 checkpoints, the Wikipedia
# dump, config, vocabulary): downloaded at once, before the unused part is removed.
INPUT_DATASET_BYTES = 23_160_000_000

_PART = re.compile(r"part-\d{5}-of-(\d{5})")
_LENGTH = re.compile(rb"Length: (\d+)")
_FAILED = re.compile(r"^(.+): FAILED", re.MULTILINE)


class ChecksumError(PrepError):
    pass


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
        digest = file_hash(self.root / rel)
        self.record(rel, digest)
        return digest

    def record(self, rel: str, digest: str) -> None:
        st = (self.root / rel).stat()
        self.entries[rel] = [st.st_size, st.st_mtime_ns, digest]
        write_json_atomic(self.path, self.entries)


def parse_md5_list(text: str, source: str) -> list[tuple[str, str]]:
    """(md5, relative path) of each line of an `md5sum` listing."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = re.fullmatch(r"([0-9a-fA-F]{32})\s+\*?(?:\./)?(.+?)\s*", line)
        if not m:
            raise PrepError(f"{source}: not an md5 list line: {line!r}")
        out.append((m.group(1).lower(), m.group(2)))
    return out


def destination(rel: str) -> str | None:
    """Where a file of MLCommons' datasets goes, or None if the pipeline does not use it."""
    parts = rel.split("/")
    base = parts[-1]
    if base in ("bert_config.json", "vocab.txt") and not any("tf2" in p for p in parts):
        return f"phase1/{base}"
    if base.startswith(f"{CHECKPOINT}.") and "tf1_ckpt" in parts:
        return f"phase1/{base}"
    if _PART.fullmatch(base) or base == "eval.txt":
        return f"{TEXT_DIR}/{base}"
    return None


def _needed_present(root: Path, dataset: str, verified: Verified) -> bool:
    """Whether the dataset's files that the pipeline uses are in place and match the published MD5s."""
    if dataset == INPUT_DATASET:
        rels = [f"phase1/{n}" for n in PHASE1_FILES]
    else:
        parts = sorted((root / TEXT_DIR).glob("part-*-of-*")) if (root / TEXT_DIR).is_dir() else []
        n = int(_PART.fullmatch(parts[0].name).group(1)) if parts else TEXT_PARTS
        rels = [f"{TEXT_DIR}/eval.txt"] + [f"{TEXT_DIR}/part-{k:05d}-of-{n:05d}" for k in range(n)]
    if not all((root / rel).is_file() for rel in rels):
        return False
    # Files are moved into place only after the downloader's check: the pinned MD5s are what is left to check.
    return all(
        verified.md5(rel) == PUBLISHED_MD5[Path(rel).name] for rel in rels if Path(rel).name in PUBLISHED_MD5
    )


def fetch_r2_downloader(dest: Path, url: str = R2_DOWNLOADER_URL) -> Path:
    """MLCommons' downloader script, fetched to `dest` (a failed fetch stops here, not in bash)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            dest.write_bytes(resp.read())
    except (OSError, urllib.error.URLError) as e:
        raise PrepError(
            f"could not fetch MLCommons' R2 downloader from {url}: {e}; "
            "set R2_DOWNLOADER=/path/to/mlc-r2-downloader.sh to use a local copy"
        ) from e
    return dest


def _read_output(pipe: BinaryIO, log_file: BinaryIO, lengths: list[int]) -> None:
    """Copy the downloader's output to its log, collecting the file sizes wget announces."""
    pending = b""
    while chunk := pipe.read1(1 << 16):
        log_file.write(chunk)
        pending += chunk
        *lines, pending = re.split(rb"[\r\n]", pending)
        lengths.extend(int(m.group(1)) for line in lines if (m := _LENGTH.search(line)))


def _bytes_under(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _estimated_total(listed: int, lengths: list[int]) -> tuple[int, bool]:
    """Total bytes of a dataset: the announced sizes, plus their mean for each file not started yet."""
    known = list(lengths)
    if not known:
        return 0, False
    unknown = max(0, listed - len(known))
    return sum(known) + unknown * sum(known) // len(known), unknown == 0


def run_r2_downloader(
    script: Path,
    uri: str,
    folder: Path,
    log_path: Path,
    stream: TextIO | None = None,
    poll_seconds: float = 1.0,
    log_every: float = 30.0,
) -> None:
    """`bash script -d folder uri`, its output to `log_path`, a byte progress line to `stream` (stderr)."""
    name = Path(uri).name.removesuffix(".uri")
    folder.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    progress = ByteProgress(f"download {name}", _bytes_under(folder), stream, log_every)
    lengths: list[int] = []
    env = {**os.environ, "LC_ALL": "C"}  # wget's messages in English: its `Length:` lines are parsed
    cmd = ["bash", str(script), "-d", str(folder), uri]
    with (
        open(log_path, "ab") as log_file,
        subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        ) as proc,
    ):
        reader = threading.Thread(target=_read_output, args=(proc.stdout, log_file, lengths), daemon=True)
        reader.start()
        while proc.poll() is None:
            time.sleep(poll_seconds)
            listing = folder / f"{name}.md5"
            listed = len(listing.read_text().splitlines()) if listing.is_file() else 0
            progress.update(_bytes_under(folder), *_estimated_total(listed, lengths))
        reader.join()
    progress.done = _bytes_under(folder)
    progress.finish(complete=proc.returncode == 0)
    if proc.returncode != 0:
        output = log_path.read_bytes()[-200_000:].decode("utf-8", "replace").replace("\r", "\n")
        failed = _FAILED.findall(output)
        for rel in failed:  # a complete but wrong file would be kept by wget --continue: set it aside
            if (folder / rel).is_file():
                os.replace(folder / rel, folder / f"{rel}.corrupt")
        tail = "\n    ".join([line for line in output.splitlines() if line.strip()][-12:])
        what = f": {len(failed)} file(s) failed their md5 check, renamed *.corrupt" if failed else ""
        raise PrepError(
            f"MLCommons' R2 downloader failed for {name} (exit {proc.returncode}){what}; run again to "
            f"resume. Its last lines (all of them in {log_path}):\n    {tail}"
        )


def place_dataset(root: Path, dataset: str, folder: Path, verified: Verified) -> int:
    """Check a downloaded dataset's listing against the published MD5s, move the files we use into place and
    remove the rest; returns how many files were placed."""
    listing = folder / f"{dataset}.md5"
    entries = parse_md5_list(listing.read_text(), str(listing))
    first = {}  # destination -> (md5, rel); a name listed twice: the first one, as the listing orders them
    for md5, rel in entries:
        if (dest := destination(rel)) and dest not in first:
            first[dest] = (md5, rel)
    wanted = [(md5, rel, dest) for dest, (md5, rel) in first.items()]
    for md5, rel, dest in wanted:
        published = PUBLISHED_MD5.get(Path(dest).name)
        if published and md5 != published:
            raise PrepError(
                f"upstream changed: {dataset} lists md5 {md5} for {rel}, MLCommons published {published}; "
                "the data set is not the one MLPerf results were produced with"
            )
    expected = [f"phase1/{n}" for n in PHASE1_FILES] if dataset == INPUT_DATASET else [f"{TEXT_DIR}/eval.txt"]
    missing = sorted(set(expected) - {dest for _, _, dest in wanted})
    if dataset == TEXT_DATASET and not any(_PART.fullmatch(Path(d).name) for _, _, d in wanted):
        missing.append(f"{TEXT_DIR}/part-*")
    if missing:
        raise PrepError(f"{listing} lists no {', '.join(missing)}")
    for md5, rel, dest in wanted:
        (root / dest).parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder / rel, root / dest)
        verified.record(dest, md5)  # checked by the downloader against the listing
    shutil.rmtree(folder)
    return len(wanted)


def check_inputs(root: Path, verified: Verified | None = None) -> dict:
    """Check that the downloaded inputs are all there and match the published MD5s (for --skip-download)."""
    verified = verified or Verified(root)
    phase1 = [f"phase1/{n}" for n in PHASE1_FILES]
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
    root: Path, metadata_url: str = MLCOMMONS_METADATA, downloader: Path | None = None
) -> dict:
    """Fetch the datasets whose files are not in place yet, check and place them; returns input statistics."""
    verified = Verified(root)
    todo = [d for d in (INPUT_DATASET, TEXT_DATASET) if not _needed_present(root, d, verified)]
    log(f"[download] {2 - len(todo)} of 2 MLCommons datasets in place; fetching {', '.join(todo) or 'none'}")
    if todo and downloader is None:
        downloader = fetch_r2_downloader(root / ".prep" / "mlc-r2-downloader.sh")
    for dataset in todo:
        folder = root / "download" / dataset
        run_r2_downloader(
            downloader, f"{metadata_url}/{dataset}.uri", folder, root / ".prep" / f"download-{dataset}.log"
        )
        placed = place_dataset(root, dataset, folder, verified)
        log(f"[download] {dataset}: {placed} files checked and in place")
    return check_inputs(root, verified)
