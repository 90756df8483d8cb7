"""Check a prepared BERT data folder: against its `manifest.json`, or, for a folder AMD's or NVIDIA's scripts
prepared (no manifest), against what their layout must hold.

    python -m input_preprocessing.bert.verify DIR [--full] [--preflight]

Fast (default; what the benchmark's preflight runs): every listed file exists with its recorded size and
the sha256 of its sampled blocks (`common/checksums.py`: bytes overwritten in place show; a manifest
written before those were recorded skips this, with a note); every HDF5 file opens, all its per-sample
datasets hold the recorded number of samples (metadata only), it is not empty, and the digest of its first
sample matches the manifest (so a shard replaced by a copy of another shows up, and identical shards are an
error); no unlisted file sits in a data folder (a trainer globbing `part_*` would read it); and, for data
made from MLCommons' text, the eval set's digest by NVIDIA's method equals the one NVIDIA publishes
(`nvidia_hdf5_md5`). Full (`--full`): also the sha256 of every file.

Without a manifest (their layouts, read as they are): `phase1/bert_config.json` is MLPerf's (md5),
`phase1/model.ckpt-28252.pt` holds every tensor of that config's BERT (NVIDIA's `{"model": state_dict}` or a
plain state dict; the vocabulary may be padded, as NVIDIA's converter pads it), the packed shards are
`part_00000` ... in `hdf5/packed_data/` (this toolkit's and AMD's) or `packed_data/` (NVIDIA's, beside its
`shard_list_*.lst` files, as many), each opening with the packed datasets, and the eval set
`hdf5/eval_varlength/part_eval_10k.hdf5` is NVIDIA's by its digest.

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

from .download import PUBLISHED_MD5
from .runtime import parallel_map

MANIFEST = "manifest.json"
FORMAT = "mlperf-repro/bert-data/1"
EVAL_FILE = "hdf5/eval_varlength/part_eval_10k.hdf5"
CONFIG_FILE = "phase1/bert_config.json"
CHECKPOINT_FILE = "phase1/model.ckpt-28252.pt"
# Where the packed training shards are: this toolkit's and AMD's folder, then NVIDIA's (the trainer looks in
# the same two, training/bert/data.py).
PACKED_DIRS = ("hdf5/packed_data", "packed_data")
PACKED_DATASETS = (
    "input_ids",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "packed_input_len",
    "packed_masked_lm_len",
    "next_sentence_labels",
)
EVAL_DATASETS = ("input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids", "next_sentence_labels")
# NVIDIA's digest of the 10,000-sample eval set, `part_eval_10k.hdf5` in its MLPerf BERT implementation's
# input_preprocessing/eval_varlength.chk (v4.0 to v5.1), by its hdf5_md5.py: see `nvidia_hdf5_md5`.
NVIDIA_EVAL_MD5 = "611d8bae26646145e1c33338a27ba124"
MLCOMMONS_EVAL_SAMPLES = 10_000
MAX_SHARD_PROBLEMS = 5


def nvidia_hdf5_md5(path: Path) -> str:
    """NVIDIA's `hdf5_md5.py` digest of a variable-length HDF5 file: it hashes the token ids only, row by
    row, as Python prints them. For each row of `input_ids`, the md5 hex digest of the row's ids written as
    a Python list of ints (`[101, 2054, 102]`); then the md5 hex digest of those digests written as a Python
    list of strings (`['9a0b...', '4c1d...']`). The bytes of the file, the other datasets and the HDF5
    library's layout do not enter it."""
    with h5py.File(path, "r") as f:
        rows = f["input_ids"][:]
    outer = hashlib.md5(b"[", usedforsecurity=False)
    for i, row in enumerate(rows):
        ids = "[" + ", ".join(map(str, np.asarray(row).tolist())) + "]"
        digest = hashlib.md5(ids.encode(), usedforsecurity=False).hexdigest()
        outer.update(f"{', ' if i else ''}'{digest}'".encode())
    outer.update(b"]")
    return outer.hexdigest()


def eval_set_problems(path: Path, expected: str | None = None) -> list[str]:
    """The eval set against NVIDIA's published digest ([] when it matches)."""
    expected = expected or NVIDIA_EVAL_MD5
    if not path.is_file():
        return [f"missing: {path} (the 10,000-sample eval set)"]
    try:
        with h5py.File(path, "r") as f:
            missing = [name for name in EVAL_DATASETS if name not in f]
        got = nvidia_hdf5_md5(path)
    except (OSError, KeyError, ValueError) as err:
        return [f"{path}: unreadable HDF5 ({err})"]
    if missing:
        return [f"{path}: lacks the dataset(s) {', '.join(missing)}"]
    if got != expected:
        return [
            f"{path}: not MLPerf's eval set: its digest by NVIDIA's hdf5_md5.py method is {got}, NVIDIA "
            f"publishes {expected} (eval_varlength.chk); it was changed, or made from other text or settings"
        ]
    return []


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
    entry = {
        "path": rel,
        "size": path.stat().st_size,
        "sha256": file_hash(path, "sha256"),
        "samples": None,
        KEY: sampled_sha256(path),
    }
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


def made_from_mlcommons_text(manifest: dict) -> bool:
    """Whether a prepared folder's eval set is meant to be MLPerf's: MLCommons' text, 10,000 samples."""
    settings = manifest.get("settings", {})
    return (
        settings.get("source") == {"mirror": "mlcommons"}
        and settings.get("eval_samples") == MLCOMMONS_EVAL_SAMPLES
    )


def packed_dir(root: Path) -> Path | None:
    """The first of PACKED_DIRS under `root` that holds `part_*` files."""
    for rel in PACKED_DIRS:
        folder = root / rel
        if folder.is_dir() and any(p.name.startswith("part_") for p in folder.iterdir()):
            return folder
    return None


def shard_problems(root: Path) -> tuple[list[str], Path | None, int]:
    """(problems, folder, shards) of the packed training shards of a folder without a manifest: named
    part_00000 ... without a gap, as many as NVIDIA's shard_list_*.lst files where those are there, each
    opening with the packed datasets, of one length, not empty (metadata only)."""
    folder = packed_dir(root)
    if folder is None:
        where = " nor ".join(f"{root / rel}/part_*" for rel in PACKED_DIRS)
        return [f"no packed training shards: neither {where}"], None, 0
    shards = sorted(p for p in folder.iterdir() if p.name.startswith("part_"))
    problems = []
    names = [p.name for p in shards]
    if names != [f"part_{i:05d}" for i in range(len(shards))]:
        problems.append(
            f"{folder}: shards are not part_00000 ... part_{len(shards) - 1:05d} ({names[:3]} ...)"
        )
    lists = sorted(folder.glob("shard_list_*.lst"))
    if lists and len(lists) != len(shards):
        problems.append(
            f"{folder}: {len(shards)} shards but {len(lists)} shard_list_*.lst files (unfinished?)"
        )
    bad = 0
    for shard in shards:
        try:
            with h5py.File(shard, "r") as f:
                missing = [name for name in PACKED_DATASETS if name not in f]
                lengths = {len(f[name]) for name in PACKED_DATASETS if name in f}
            trouble = (
                f"lacks {', '.join(missing)}"
                if missing
                else "datasets of different lengths"
                if len(lengths) > 1
                else "empty (0 rows)"
                if lengths == {0}
                else None
            )
        except OSError as err:
            trouble = f"unreadable HDF5 ({err})"
        if trouble:
            bad += 1
            if bad <= MAX_SHARD_PROBLEMS:
                problems.append(f"{shard}: {trouble}")
    if bad > MAX_SHARD_PROBLEMS:
        problems.append(f"{folder}: {bad - MAX_SHARD_PROBLEMS} more shards with problems")
    return problems, folder, len(shards)


def checkpoint_problems(path: Path, config: dict | None) -> list[str]:
    """The converted phase-1 checkpoint: NVIDIA's `{"model": state_dict}` or a plain state dict, holding
    every tensor of `config`'s BERT (Hugging Face names, as NVIDIA's converter writes them) at its shape; the
    vocabulary rows may be padded (NVIDIA's converter pads them to a multiple of 8)."""
    if not path.is_file():
        return [f"missing: {path} (the converted phase-1 checkpoint)"]
    import torch

    from .tf_checkpoint import VOCAB_MULTIPLE, VOCAB_TENSORS, expected_shapes

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 - torch raises many kinds for a damaged file; each is named
        return [f"{path}: unreadable ({type(err).__name__}: {err})"]
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]
    if not isinstance(state, dict) or config is None:
        return [] if isinstance(state, dict) else [f"{path}: not a state dict"]
    try:
        expected = expected_shapes(config)
    except KeyError as err:
        return [f"{path.parent / 'bert_config.json'}: no {err}"]
    problems = []
    for name, shape in expected.items():
        if name not in state:
            problems.append(f"{path}: lacks {name}")
            continue
        got = tuple(state[name].shape)
        padded = name in VOCAB_TENSORS and got[1:] == shape[1:] and 0 <= got[0] - shape[0] < VOCAB_MULTIPLE
        if got != shape and not padded:
            problems.append(
                f"{path}: {name} has shape {list(got)}, bert_config.json's BERT needs {list(shape)}"
            )
    if len(problems) > MAX_SHARD_PROBLEMS:
        more = f"{path}: {len(problems) - MAX_SHARD_PROBLEMS} more tensor problems"
        problems = [*problems[:MAX_SHARD_PROBLEMS], more]
    return problems


def verify_foreign(root: Path) -> list[str]:
    """Problems with a folder prepared by AMD's or NVIDIA's scripts (no manifest): see the module's doc."""
    problems, config = [], None
    config_path = root / CONFIG_FILE
    if not config_path.is_file():
        problems.append(f"missing: {config_path}")
    else:
        try:
            config = json.loads(config_path.read_text())
        except ValueError as err:
            problems.append(f"{config_path}: unreadable ({err})")
        published = PUBLISHED_MD5.get("bert_config.json")
        if published and file_hash(config_path) != published:
            problems.append(f"{config_path}: md5 {file_hash(config_path)}, MLPerf's is {published}")
    problems += checkpoint_problems(root / CHECKPOINT_FILE, config)
    problems += shard_problems(root)[0]
    return problems + eval_set_problems(root / EVAL_FILE)


def verify(root: Path, full: bool = False) -> list[str]:
    """Problems with the prepared folder `root` (empty list: OK). Fast unless `full`. A folder without a
    manifest is checked as AMD's or NVIDIA's scripts lay it out (`verify_foreign`)."""
    root = Path(root)
    manifest_path = root / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        if not root.is_dir():
            return [f"{root}: no such folder"]
        return verify_foreign(root)
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
    if made_from_mlcommons_text(manifest) and EVAL_FILE in listed and (root / EVAL_FILE).is_file():
        problems += [
            p.replace(f"{root / EVAL_FILE}: ", f"{EVAL_FILE}: ") for p in eval_set_problems(root / EVAL_FILE)
        ]
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
        help="as the benchmark's preflight runs it (the same fast check; the preflight has opened the first "
        "and last shard with the trainer's reader)",
    )
    args = parser.parse_args(argv)
    problems = verify(args.root, args.full)
    for p in problems:
        print(f"{args.root}: {p}", file=sys.stderr)
    if problems:
        print(f"FAILED: {len(problems)} problem(s) in {args.root}", file=sys.stderr)
        return 1
    if not (args.root / MANIFEST).exists():
        _, folder, shards = shard_problems(args.root)
        print(
            f"OK: {args.root} (no {MANIFEST}: laid out as AMD's or NVIDIA's scripts lay it out): {shards} "
            f"packed shards in {folder.relative_to(args.root)}, the eval set is NVIDIA's by its digest, "
            f"{CHECKPOINT_FILE} holds MLPerf's BERT"
        )
        return 0
    entries = json.loads((args.root / MANIFEST).read_text())["files"]
    unsampled = sum(KEY not in e for e in entries)
    if unsampled and not args.full:
        print(
            f"{args.root}: note: {unsampled} files of {MANIFEST} have no sampled-block checksums (prepared "
            f"before they were recorded): {SKIPPED}"
        )
    print(
        f"OK: {len(entries)} files in {args.root} match {MANIFEST} ({'full' if args.full else 'fast'} check)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
