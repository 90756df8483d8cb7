"""Download MLCommons' BERT inputs with MLCommons' R2 downloader and check them against the published MD5s.

MLCommons publishes the inputs as two datasets of its Cloudflare R2 bucket, each fetched whole by its
`mlc-r2-downloader.sh` (pinned: `input_preprocessing/common/r2.py`; `-d DIR <name>.uri`, wget --continue, so
a rerun resumes; then every file is checked against the dataset's MD5 list):
- `bert-input-files`: bert_config.json, vocab.txt, tf1_ckpt/model.ckpt-28252.*, and what the pipeline does not
  use (per MLCommons' README, the TF2 checkpoint, 1.3 GB, and the Wikipedia dump the text came from, 17.8 GB);
  the files used go to `phase1/`.
- `bert-preprocessed-wikipedia-dataset`: the processed Wikipedia text in archive form, a copy of the
  "Processed dataset" folder MLCommons first shared on Google Drive (later the bucket's
  `wikipedia_for_bert/processed_dataset`): `results_text.tar.gz` and `results_text.zip`, each holding
  `results4/` with the 500 `part-NNNNN-of-00500` files, `eval.txt` and `eval.md5`, and
  `bert_reference_results_text_md5.txt`, the MD5 list of `results4/`'s files that NVIDIA's prepare_data.sh
  checks them with (`cd results4 && md5sum --check ../bert_reference_results_text_md5.txt`). The bucket
  offers no separate text files (the public scripts that use it all unpack an archive), so none are looked
  for. One archive is unpacked (tar.gz, as NVIDIA's script, else zip) into `download/results4/`, file by
  file (a rerun skips the files already there at their size), and every file used is then checked against
  that list and against the MD5s MLCommons published in the BERT reference's README (pinned below: six
  parts and eval.txt); a file that fails is renamed `*.corrupt` and named, so that a rerun unpacks it again.
  The list is kept as `download/bert_reference_results_text_md5.txt`, where NVIDIA's layout has it; the
  archives are removed once everything checks.

On top of the downloader's own check, the listed MD5s of the files we use are compared with the ones MLCommons
published (pinned below): a disagreement is reported as "upstream changed". Before each dataset is fetched,
the free disk is checked against its size (asked of the bucket, else the published or estimated figure below).

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
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, BinaryIO, TextIO

from input_preprocessing.common import r2
from input_preprocessing.common.checksums import file_hash
from input_preprocessing.common.runtime import (
    PrepError,
    Progress,
    check_free_disk,
    log,
    remove_stale_tmp,
    write_json_atomic,
)
from training.common.files import atomic_path

from .runtime import ByteProgress

MLCOMMONS_METADATA = "https://training.mlcommons-storage.org/metadata"
INPUT_DATASET = "bert-input-files"
TEXT_DATASET = "bert-preprocessed-wikipedia-dataset"
CHECKPOINT = "model.ckpt-28252"
TEXT_DIR = "download/results4"
TEXT_PARTS = 500
TEXT_ARCHIVES = ("results_text.tar.gz", "results_text.zip")  # in order of preference
TEXT_MD5_LIST = "bert_reference_results_text_md5.txt"
PHASE1_FILES = ("bert_config.json", "vocab.txt", f"{CHECKPOINT}.index", f"{CHECKPOINT}.data-00000-of-00001")

# MD5s and sizes published by MLCommons (mlcommons/training, BERT reference README.md and dataset.md).
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
# The two text archives: no size is published; each is "over 4 GB" (Habana's MLPerf BERT README), about 35%
# of the 13.1 GB of text as gzip and deflate compress English text. An estimate, used when the bucket does
# not answer a size query.
TEXT_ARCHIVES_BYTES_ESTIMATE = 2 * 4_600_000_000

_PART = re.compile(r"part-\d{5}-of-(\d{5})")
_MEMBER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
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
    """Where a file of MLCommons' input dataset goes, or None if the pipeline does not use it."""
    parts = rel.split("/")
    base = parts[-1]
    if base in ("bert_config.json", "vocab.txt") and not any("tf2" in p for p in parts):
        return f"phase1/{base}"
    if base.startswith(f"{CHECKPOINT}.") and "tf1_ckpt" in parts:
        return f"phase1/{base}"
    return None


def text_files(root: Path) -> list[str]:
    """The text files the pipeline uses (eval.txt, then the parts), relative to `root`; the part count is in
    the names (part-00000-of-00500), 500 when there are none yet."""
    found = sorted((root / TEXT_DIR).glob("part-*-of-*")) if (root / TEXT_DIR).is_dir() else []
    m = _PART.fullmatch(found[0].name) if found else None
    n = int(m.group(1)) if m else TEXT_PARTS
    return [f"{TEXT_DIR}/eval.txt"] + [f"{TEXT_DIR}/part-{k:05d}-of-{n:05d}" for k in range(n)]


def text_problems(root: Path, verified: Verified, set_aside: bool = False) -> list[str]:
    """What is wrong with the text in `download/results4`: missing files, and files whose md5 differs from
    `download/bert_reference_results_text_md5.txt` (when it is there) or from MLCommons' pinned MD5s. With
    `set_aside`, a file that fails is renamed `*.corrupt` (a rerun unpacks it again)."""
    rels = text_files(root)
    missing = [rel for rel in rels if not (root / rel).is_file()]
    if missing:
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        return [f"missing: {', '.join(str(root / m) for m in missing[:4])}{more}"]
    md5_list = root / "download" / TEXT_MD5_LIST
    listed = {}
    if md5_list.is_file():
        listed = {Path(rel).name: md5 for md5, rel in parse_md5_list(md5_list.read_text(), str(md5_list))}
    problems = []
    for rel in rels:
        name = Path(rel).name
        pinned, expected = PUBLISHED_MD5.get(name), listed.get(name)
        if listed and expected is None and pinned is None:
            problems.append(f"{root / rel}: not in {md5_list}, so it cannot be checked")
            continue
        got = verified.md5(rel)
        if expected and got != expected:
            why = f"md5 {got}, {md5_list.name} says {expected} (corrupt)"
        elif pinned and got != pinned:
            why = f"md5 {got}, MLCommons published {pinned}"
        else:
            continue
        if set_aside:
            os.replace(root / rel, root / f"{rel}.corrupt")
            verified.entries.pop(rel, None)
            why += "; renamed *.corrupt, run again to unpack it anew"
        problems.append(f"{root / rel}: {why}")
    return problems


def _needed_present(root: Path, dataset: str, verified: Verified) -> bool:
    """Whether the dataset's files that the pipeline uses are in place and match the published MD5s."""
    if dataset == TEXT_DATASET:
        return (root / "download" / TEXT_MD5_LIST).is_file() and not text_problems(root, verified)
    rels = [f"phase1/{n}" for n in PHASE1_FILES]
    if not all((root / rel).is_file() for rel in rels):
        return False
    # Files are moved into place only after the downloader's check: the pinned MD5s are what is left to check.
    return all(
        verified.md5(rel) == PUBLISHED_MD5[Path(rel).name] for rel in rels if Path(rel).name in PUBLISHED_MD5
    )


def _read_output(pipe: BinaryIO, log_file: BinaryIO, lengths: list[int]) -> None:
    """Copy the downloader's output to its log, collecting the file sizes wget announces."""
    pending = b""
    while chunk := pipe.read1(1 << 16):
        log_file.write(chunk)
        pending += chunk
        *lines, pending = re.split(rb"[\r\n]", pending)
        lengths.extend(int(m.group(1)) for line in lines if (m := _LENGTH.search(line)))


def _bytes_under(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


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


def place_inputs(root: Path, folder: Path, verified: Verified) -> int:
    """Check the downloaded input dataset's listing against the published MD5s, move the files we use into
    `phase1/` and remove the rest; returns how many files were placed."""
    listing = folder / f"{INPUT_DATASET}.md5"
    entries = parse_md5_list(listing.read_text(), str(listing))
    first = {}  # destination -> (md5, rel); a name listed twice: the first one, as the listing orders them
    for md5, rel in entries:
        if (dest := destination(rel)) and dest not in first:
            first[dest] = (md5, rel)
    for dest, (md5, rel) in first.items():
        published = PUBLISHED_MD5.get(Path(dest).name)
        if published and md5 != published:
            raise PrepError(
                f"upstream changed: {INPUT_DATASET} lists md5 {md5} for {rel}, MLCommons published "
                f"{published}; the data set is not the one MLPerf results were produced with"
            )
    missing = sorted({f"phase1/{n}" for n in PHASE1_FILES} - set(first))
    if missing:
        raise PrepError(f"{listing} lists no {', '.join(missing)}")
    for dest, (md5, rel) in first.items():
        (root / dest).parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder / rel, root / dest)
        verified.record(dest, md5)  # checked by the downloader against the listing
    shutil.rmtree(folder)
    return len(first)


def _find(folder: Path, name: str) -> Path | None:
    found = sorted(p for p in folder.rglob(name) if p.is_file())
    return found[0] if found else None


def _members(archive: Path) -> Iterator[tuple[str, int, Callable[[], IO[bytes]]]]:
    """(file name, size, opener) of each regular file in a tar.gz or zip archive, in archive order; the
    opener gives a readable stream (tar.gz is read front to back, so it is valid until the next member)."""
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    yield info.filename, info.file_size, lambda info=info: zf.open(info)
        return
    with tarfile.open(archive, "r:gz") as tf:
        for member in tf:
            if member.isfile():
                yield member.name, member.size, lambda member=member: tf.extractfile(member)


def unpack_text(root: Path, archive: Path, expected: int) -> int:
    """Unpack the text files of `archive` (`results4/<name>`) into `download/results4/`, each written to a
    temporary name and renamed when complete; files already there at their size are skipped. Returns how
    many files the archive holds."""
    out = root / TEXT_DIR
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(out)
    progress = Progress(f"unpack {archive.name}", expected, "files")
    seen: set[str] = set()
    for member, size, opener in _members(archive):
        name = member.rsplit("/", 1)[-1]
        if not _MEMBER.fullmatch(name) or name in seen:
            raise PrepError(f"{archive}: unexpected member {member!r} (a results4/ file name, once each)")
        seen.add(name)
        dest = out / name
        if not (dest.is_file() and dest.stat().st_size == size):
            with opener() as src, atomic_path(dest) as tmp, open(tmp, "wb") as f:
                shutil.copyfileobj(src, f, 1 << 22)
        if progress.done < progress.total:
            progress.advance()
    if not seen:
        raise PrepError(f"{archive}: holds no files")
    return len(seen)


def place_text(root: Path, folder: Path, verified: Verified) -> int:
    """Unpack the downloaded text dataset and check every file the pipeline uses against MLCommons' MD5
    list and the pinned MD5s; the archives are removed once all check. Returns how many files were checked."""
    archives = [p for p in (_find(folder, name) for name in TEXT_ARCHIVES) if p]
    if not archives:
        raise PrepError(f"{folder} holds neither {' nor '.join(TEXT_ARCHIVES)} (MLCommons' text archives)")
    md5_list = _find(folder, TEXT_MD5_LIST) or root / "download" / TEXT_MD5_LIST
    if not md5_list.is_file():
        raise PrepError(
            f"{TEXT_DATASET} holds no {TEXT_MD5_LIST} (the MD5 list of the 500 text parts that NVIDIA's "
            f"prepare_data.sh checks them with), and {md5_list} is not there either: put a copy there and "
            "run again"
        )
    entries = parse_md5_list(md5_list.read_text(), str(md5_list))
    published = {Path(rel).name: md5 for md5, rel in entries}
    changed = [
        f"{n}: listed {md5}, published {PUBLISHED_MD5[n]}"
        for n, md5 in sorted(published.items())
        if PUBLISHED_MD5.get(n, md5) != md5
    ]
    if changed:
        raise PrepError(
            f"upstream changed: {md5_list} disagrees with the MD5s MLCommons published "
            f"({'; '.join(changed)}); the text is not the one MLPerf results were produced with"
        )
    if md5_list != root / "download" / TEXT_MD5_LIST:
        shutil.copyfile(md5_list, root / "download" / TEXT_MD5_LIST)
    held = unpack_text(root, archives[0], len(entries))
    listed_not_held = sorted(set(published) - {p.name for p in (root / TEXT_DIR).iterdir()})
    if listed_not_held:
        raise PrepError(f"{archives[0]} lacks {', '.join(listed_not_held[:4])}, which {md5_list.name} lists")
    problems = text_problems(root, verified, set_aside=True)
    if not problems:
        for leftover in (root / TEXT_DIR).glob("*.corrupt"):  # set aside by an earlier run, now replaced
            leftover.unlink()
    if problems:
        lines = "\n  ".join(problems)
        raise ChecksumError(f"the text from {archives[0].name} failed its checks:\n  {lines}")
    shutil.rmtree(folder)
    return held


def check_inputs(root: Path, verified: Verified | None = None) -> dict:
    """Check that the downloaded inputs are all there and match the published MD5s (for --skip-download),
    and the text MLCommons' MD5 list where `download/bert_reference_results_text_md5.txt` is there."""
    verified = verified or Verified(root)
    phase1 = [f"phase1/{n}" for n in PHASE1_FILES]
    missing = [rel for rel in phase1 if not (root / rel).exists()]
    if missing:
        raise PrepError(
            f"inputs missing under {root}: {', '.join(missing)}; run without --skip-download to fetch them"
        )
    for rel in phase1:
        published = PUBLISHED_MD5.get(Path(rel).name)
        if published and verified.md5(rel) != published:
            raise ChecksumError(
                f"{root / rel}: md5 {verified.md5(rel)} does not match the published {published}"
            )
    if not (root / "download" / TEXT_MD5_LIST).is_file():
        log(f"[inputs] no download/{TEXT_MD5_LIST}: the text is checked against the pinned MD5s only")
    problems = text_problems(root, verified)
    if problems:
        hint = "; run without --skip-download to fetch them" if problems[0].startswith("missing") else ""
        raise ChecksumError(f"the text under {root / TEXT_DIR}: " + "; ".join(problems) + hint)
    rels = text_files(root)
    return {"text_parts": len(rels) - 1, "text_bytes": sum((root / rel).stat().st_size for rel in rels[1:])}


def _check_disk(root: Path, dataset: str, uri: str, folder: Path) -> None:
    """Free disk for what is still to come of `dataset`: its files (sized by the bucket, else the figure
    above) less what is already downloaded, plus for the text its unpacked size less what is unpacked."""
    size = r2.remote_bytes(uri)
    if dataset == INPUT_DATASET:
        fallback, what = INPUT_DATASET_BYTES, "MLCommons' published file sizes"
        unpacked = 0
    else:
        fallback, what = TEXT_ARCHIVES_BYTES_ESTIMATE, "an estimate: the bucket gave no sizes"
        unpacked = max(0, TEXT_BYTES_ESTIMATE - _bytes_under(root / TEXT_DIR))
    source = "the sizes the bucket reports" if size is not None else what
    needed = max(0, (fallback if size is None else size) - _bytes_under(folder)) + unpacked
    check_free_disk(root, needed, f"the {dataset} download, {source}")


def download_inputs(
    root: Path,
    metadata_url: str = MLCOMMONS_METADATA,
    downloader: Path | None = None,
    disk_check: bool = True,
) -> dict:
    """Fetch the datasets whose files are not in place yet, check and place them; returns input statistics."""
    verified = Verified(root)
    todo = [d for d in (INPUT_DATASET, TEXT_DATASET) if not _needed_present(root, d, verified)]
    log(f"[download] {2 - len(todo)} of 2 MLCommons datasets in place; fetching {', '.join(todo) or 'none'}")
    for dataset in todo:
        folder, uri = root / "download" / dataset, f"{metadata_url}/{dataset}.uri"
        if disk_check:
            _check_disk(root, dataset, uri, folder)
        downloader = downloader or r2.downloader(root / ".prep")
        run_r2_downloader(downloader, uri, folder, root / ".prep" / f"download-{dataset}.log")
        placed = (place_inputs if dataset == INPUT_DATASET else place_text)(root, folder, verified)
        log(f"[download] {dataset}: {placed} files checked and in place")
    return check_inputs(root, verified)
