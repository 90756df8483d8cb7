"""Check a prepared BERT data folder against its `manifest.json`.

    python -m input_preprocessing.bert.verify DIR [--full] [--preflight]

Fast (default; what the benchmark's preflight runs): every listed file exists with its recorded size and
the sha256 of its sampled blocks (`common/checksums.py`: bytes overwritten in place show; a manifest
written before those were recorded skips this, with a note); every HDF5 file opens, all its per-sample
datasets hold the recorded number of samples (metadata only), it is not empty, and the digest of its first
sample matches the manifest (so a shard replaced by a copy of another shows up, and identical shards are an
error); no unlisted file sits in a data folder (a trainer globbing `part_*` would read it). Full (`--full`):
also the sha256 of every file.

`verify(root, full=False)` returns the problems found, each naming its file; an empty list means OK.
`build_manifest` writes the manifest at the end of data preparation.
"""

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import h5py
import numpy as np

from input_preprocessing.common.checksums import KEY, SKIPPED, file_hash, sampled_sha256
from input_preprocessing.common.runtime import Progress, write_json_atomic

from .runtime import parallel_map

MANIFEST = "manifest.json"
FORMAT = "mlperf-repro/bert-data/1"


def _hdf5_summary(path: Path, count_sequences: bool = False) -> tuple[int, int | None, str]:
    """(samples, sequences (packed files, when asked) or None, digest of the first sample) of an HDF5 data
    file, reading only metadata and the first sample unless `count_sequences`; raises on damage."""
    with h5py.File(path, "r") as f:
        if "input_ids" not in f:
            raise ValueError("no input_ids dataset")
        samples = len(f["input_ids"])
        for name, ds in f.items():
            if len(ds) != samples:
                raise ValueError(f"dataset {name} has {len(ds)} entries, input_ids has {samples}")
        if samples == 0:
            return 0, None, ""
        head = hashlib.sha256()
        for name in sorted(f):
            head.update(name.encode())
            head.update(np.asarray(f[name][0]).tobytes())
        sequences = None
        if count_sequences and "packed_input_len" in f:
            sequences = int(sum(len(x) for x in f["packed_input_len"][:]))
        return samples, sequences, head.hexdigest()


def _is_hdf5(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == b"\x89HDF\r\n\x1a\n"


def describe_file(task: tuple[Path, str]) -> dict:
    """Worker: the manifest entry of one file."""
    root, rel = task
    path = root / rel
    entry = {"path": rel, "size": path.stat().st_size, "sha256": file_hash(path, "sha256"), "samples": None,
             KEY: sampled_sha256(path)}  # fmt: skip
    if _is_hdf5(path):
        samples, sequences, head = _hdf5_summary(path, count_sequences=True)
        entry.update(samples=samples, head_sha256=head)
        if sequences is not None:
            entry["sequences"] = sequences
    return entry


def build_manifest(root: Path, rels: list[str], data_dirs: list[str], info: dict, jobs: int) -> dict:
    progress = Progress("manifest", len(rels), "files")
    entries = parallel_map(describe_file, [(root, rel) for rel in sorted(rels)], jobs, progress)
    manifest = {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "data_dirs": sorted(data_dirs),
        "files": entries,
        **info,
    }
    write_json_atomic(root / MANIFEST, manifest)
    return manifest


def _duplicates(entries: list[dict], field: str) -> list[str]:
    seen: dict[str, str] = {}
    problems = []
    for e in entries:
        value = e.get(field)
        if not value:
            continue
        if value in seen:
            problems.append(f"{e['path']}: identical to {seen[value]} ({field})")
        else:
            seen[value] = e["path"]
    return problems


def verify(root: Path, full: bool = False) -> list[str]:
    """Problems with the prepared folder `root` (empty list: OK). Fast unless `full`."""
    root = Path(root)
    manifest_path = root / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        return [
            f"{manifest_path}: missing (data preparation did not finish, or this is not a prepared folder)"
        ]
    except (OSError, json.JSONDecodeError) as e:
        return [f"{manifest_path}: unreadable ({e})"]
    if manifest.get("format") != FORMAT:
        return [f"{manifest_path}: unknown format {manifest.get('format')!r} (expected {FORMAT})"]

    problems: list[str] = []
    entries = manifest["files"]
    listed = {e["path"] for e in entries}
    problems += _duplicates(entries, "sha256")
    for e in entries:
        path = root / e["path"]
        if not path.is_file():
            problems.append(f"{e['path']}: missing")
            continue
        size = path.stat().st_size
        if size != e["size"]:
            problems.append(f"{e['path']}: {size} bytes, manifest says {e['size']} (truncated or modified)")
            continue
        if KEY in e and sampled_sha256(path) != e[KEY]:
            problems.append(
                f"{e['path']}: sampled blocks differ from the manifest (modified in place or corrupt)"
            )
            continue
        if e.get("samples") is not None:
            try:
                samples, _, head = _hdf5_summary(path)
            except (OSError, ValueError, KeyError) as err:
                problems.append(f"{e['path']}: unreadable HDF5 ({err})")
                continue
            if samples != e["samples"]:
                problems.append(f"{e['path']}: {samples} samples, manifest says {e['samples']}")
            elif samples == 0:
                problems.append(f"{e['path']}: empty (0 samples)")
            elif head != e.get("head_sha256"):
                problems.append(f"{e['path']}: first sample differs from the manifest (replaced or modified)")
        if full and file_hash(path, "sha256") != e["sha256"]:
            problems.append(f"{e['path']}: sha256 differs from the manifest (modified or corrupt)")
    problems += _duplicates(entries, "head_sha256")
    for folder in manifest.get("data_dirs", []):
        if not (root / folder).is_dir():
            problems.append(f"{folder}: data folder missing")
            continue
        for path in sorted((root / folder).iterdir()):
            rel = path.relative_to(root).as_posix()
            if rel not in listed:
                problems.append(f"{rel}: not in the manifest (left over from another run?)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m input_preprocessing.bert.verify", description="Check a prepared BERT data folder."
    )
    parser.add_argument("root", type=Path, help="the folder prepare_data.sh wrote (--outputdir)")
    parser.add_argument("--full", action="store_true", help="also check every file's sha256 (reads all data)")
    parser.add_argument(
        "--preflight",
        action="store_true",
        help="as the benchmark's preflight runs it: a folder without a manifest (prepared by another "
        "toolkit) is not an error; the preflight has opened its shards with the trainer's reader",
    )
    args = parser.parse_args(argv)
    if args.preflight and not (args.root / MANIFEST).exists():
        print(f"{args.root}: no {MANIFEST} (not prepared by this toolkit): its integrity is not checked")
        return 0
    problems = verify(args.root, args.full)
    for p in problems:
        print(f"{args.root}: {p}", file=sys.stderr)
    if problems:
        print(f"FAILED: {len(problems)} problem(s) in {args.root}", file=sys.stderr)
        return 1
    entries = json.loads((args.root / MANIFEST).read_text())["files"]
    unsampled = sum(KEY not in e for e in entries)
    if unsampled and not args.full:
        print(f"{args.root}: note: {unsampled} files of {MANIFEST} have no sampled-block checksums (prepared "
              f"before they were recorded): {SKIPPED}")  # fmt: skip
    print(
        f"OK: {len(entries)} files in {args.root} match {MANIFEST} ({'full' if args.full else 'fast'} check)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
