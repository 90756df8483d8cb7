"""Check prepared Llama 3.1 8B data: the expected files, their structure, and (with --md5) their checksums.

    python -m input_preprocessing.llama31_8b.verify DATADIR [--md5] [--tokenizer DIR] [--preflight]

Structure: each expected prefix has a `.bin` and an `.idx`; the `.idx` opens as a Megatron indexed dataset
and the `.bin` has exactly the bytes the index describes; the validation file holds its 91,205 documents.
Checksums: every `*.md5` list in the folder (what MLCommons' R2 downloader fetches next to the data:
`<md5>  <relative path>` lines) is re-checked. Results are cached per file (size + mtime) in
`.md5_verified.json`, written after each file, so an interrupted or repeated check resumes where it was
and a changed file is checked again. The cache also records the sha256 of each checked file's sampled blocks
(`common/checksums.py`): without `--md5` those blocks are re-hashed, so that bytes overwritten in
place (the size kept) are seen in seconds before a run; a folder never checked with `--md5` gets a note that
this was skipped. With `--preflight` (as the benchmark's preflight runs it) the files are
the run's: TRAIN_DATA_PREFIX and VALID_DATA_PREFIX from the environment when set (the CPU default's data),
else MLPerf's. Exit status 1 names every problem.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from input_preprocessing.common.checksums import SKIPPED, file_hash, sampled_sha256
from training.common.files import write_text_atomic

TRAIN_PREFIX = "c4-train.en_6_text_document"
VALID_PREFIX = "c4-validation-91205-samples.en_text_document"
VALID_DOCUMENTS = 91205
CACHE_NAME = ".md5_verified.json"
LLAMA31_VOCAB, LLAMA31_EOD = 128256, "<|end_of_text|>"


def check_structure(datadir: Path, prefix: str, documents: int | None = None) -> list[str]:
    """Problems with one `.bin/.idx` pair (missing, unreadable, truncated, wrong document count)."""
    base = datadir / prefix
    missing = [f"{base}{ext}" for ext in (".bin", ".idx") if not Path(f"{base}{ext}").is_file()]
    if missing:
        return [f"missing: {m}" for m in missing]
    from training.common.indexed import DataError, open_indexed

    try:
        dataset = open_indexed(base)
    except DataError as err:
        return [str(err)]
    itemsize = np.dtype(dataset.index.dtype).itemsize
    expected = int(np.sum(dataset.sequence_lengths, dtype=np.int64)) * itemsize
    actual = os.path.getsize(f"{base}.bin")
    problems = []
    if actual != expected:
        problems.append(
            f"{base}.bin: {actual} bytes, the index describes {expected} (truncated or mismatched)"
        )
    if documents is not None and len(dataset.document_indices) - 1 != documents:
        problems.append(f"{base}: {len(dataset.document_indices) - 1} documents, expected {documents}")
    return problems


def read_md5_list(path: Path) -> list[tuple[str, str]]:
    """(md5, relative path) entries of an md5sum-style list."""
    entries = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or len(parts[0]) != 32:
            raise ValueError(f"{path}:{lineno}: not an `<md5>  <file>` line")
        entries.append((parts[0].lower(), parts[1].strip().lstrip("*").removeprefix("./")))
    return entries


def check_md5(datadir: Path) -> tuple[list[str], int]:
    """(problems, files checked) for every `*.md5` list under `datadir`, resuming from the cache."""
    lists = sorted(datadir.glob("*.md5"))
    if not lists:
        return [f"{datadir}: no *.md5 checksum list (MLCommons' downloader writes one next to the data)"], 0
    cache_path = datadir / CACHE_NAME
    try:
        cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    except ValueError:
        cache = {}
    problems, checked = [], 0
    for md5_list in lists:
        try:
            entries = read_md5_list(md5_list)
        except ValueError as err:
            problems.append(str(err))
            continue
        for expected, rel in entries:
            path = datadir / rel
            if not path.is_file():
                problems.append(f"missing: {path} (listed in {md5_list.name})")
                continue
            stat = path.stat()
            key = [stat.st_size, stat.st_mtime_ns, expected]
            if cache.get(rel, [])[:3] == key:
                if len(cache[rel]) == 3:  # checked before sampled blocks were recorded
                    cache[rel].append(sampled_sha256(path))
                    write_text_atomic(cache_path, json.dumps(cache, indent=1) + "\n")
                continue
            checked += 1
            actual = file_hash(path)
            if actual != expected:
                problems.append(
                    f"checksum mismatch: {path} has md5 {actual}, {md5_list.name} says {expected}"
                )
                cache.pop(rel, None)
            else:
                cache[rel] = [*key, sampled_sha256(path)]
            write_text_atomic(cache_path, json.dumps(cache, indent=1) + "\n")
    return problems, checked


def check_sampled(datadir: Path) -> tuple[list[str], list[str]]:
    """(problems, notes): the sampled blocks of every file `--md5` passed, re-hashed."""
    cache_path = datadir / CACHE_NAME
    try:
        cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    except ValueError:
        return [], [f"{cache_path} is unreadable: {SKIPPED}"]
    sampled = {rel: entry[3] for rel, entry in cache.items() if isinstance(entry, list) and len(entry) == 4}
    if not sampled:
        return [], [f"{datadir}: no file checked with --md5 yet: {SKIPPED}"]
    problems = [
        f"{datadir / rel}: sampled blocks changed since its md5 was checked (modified in place or corrupt): "
        "run verify --md5"
        for rel, digest in sorted(sampled.items())
        if (datadir / rel).is_file() and sampled_sha256(datadir / rel) != digest
    ]
    return problems, []


def check_tokenizer(folder: Path) -> list[str]:
    from input_preprocessing.common.tokenizer import HFTokenizer

    found = sorted(folder.rglob("tokenizer.json")) if folder.is_dir() else []
    if not found:
        return [f"tokenizer: no tokenizer.json under {folder}"]
    try:
        tok = HFTokenizer(found[0].parent)
    except (OSError, ValueError) as err:
        return [f"tokenizer: {err}"]
    if tok.vocab_size != LLAMA31_VOCAB or tok.eod_token != LLAMA31_EOD:
        return [
            f"tokenizer {folder}: vocabulary {tok.vocab_size} / EOD {tok.eod_token!r}, expected Llama 3.1's "
            f"{LLAMA31_VOCAB} / {LLAMA31_EOD!r}"
        ]
    return []


def verify(
    datadir: Path,
    md5: bool = False,
    tokenizer: Path | None = None,
    train_prefix: str = TRAIN_PREFIX,
    valid_prefix: str = VALID_PREFIX,
) -> list[str]:
    if not datadir.is_dir():
        return [f"DATADIR {datadir} does not exist"]
    documents = VALID_DOCUMENTS if valid_prefix == VALID_PREFIX else None
    problems = check_structure(datadir, train_prefix) + check_structure(datadir, valid_prefix, documents)
    elsewhere = sorted(datadir.rglob(f"{VALID_PREFIX}.idx"))
    if problems and elsewhere and elsewhere[0].parent != datadir:
        problems.append(f"the data is under {elsewhere[0].parent}: use that folder as DATADIR")
    if md5:
        problems += check_md5(datadir)[0]
    elif not problems:
        damaged, notes = check_sampled(datadir)
        problems += damaged
        for note in notes:
            print(f"verify: note: {note}")
    if tokenizer is not None:
        problems += check_tokenizer(tokenizer)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m input_preprocessing.llama31_8b.verify",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("datadir", type=Path, nargs="?", help="the data folder (DATADIR)")
    parser.add_argument("--datadir", type=Path, dest="datadir_option", help="the same, as an option")
    parser.add_argument("--md5", action="store_true", help="re-check the MD5 lists (cached per file)")
    parser.add_argument("--tokenizer", type=Path, help="also check the Llama 3.1 tokenizer folder")
    parser.add_argument("--preflight", action="store_true", help="the run's files (TRAIN/VALID_DATA_PREFIX)")
    args = parser.parse_args(argv)
    args.datadir = args.datadir or args.datadir_option
    if args.datadir is None:
        parser.error("the data folder is required (DATADIR or --datadir)")
    prefixes = {}
    if args.preflight:
        prefixes = {
            "train_prefix": os.environ.get("TRAIN_DATA_PREFIX") or TRAIN_PREFIX,
            "valid_prefix": os.environ.get("VALID_DATA_PREFIX") or VALID_PREFIX,
        }
    problems = verify(args.datadir, args.md5, args.tokenizer, **prefixes)
    for problem in problems:
        print(f"verify: {problem}", file=sys.stderr)
    print(f"verify: {args.datadir}: {'FAILED' if problems else 'OK'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
