"""Check a prepared Llama 2 70B LoRA folder: DATADIR/data (the packed rows) and DATADIR/model.

    python -m input_preprocessing.llama2_70b_lora.verify DATADIR [--full] [--preflight]

DATADIR holds `data/` and `model/`, as AMD's `DATADIR=/data/mlperf_llama2`. What the files must be comes from
`data/meta.json` (written by prepare_data.sh), or without one, the MLCommons GovReport set (3,901 and 173 rows
of 8,192 tokens, NVIDIA's file sizes, Llama 2's 32,000 tokens), so files made by AMD's or NVIDIA's scripts
check too.

Fast (default, and `--preflight`, which the benchmark's preflight runs; seconds): `train.npy` and
`validation.npy` have their sizes, the sha256 of their sampled blocks (`common/checksums.py`, where
meta.json records them: bytes overwritten in place show), `.npy` headers and row counts; every row has
exactly `input_ids`, `loss_mask` and `seq_start_id`, `seq_length` tokens, loss_mask values in {0, 1} (and
some 1s in each split), seq_start_id starting at 0, increasing and inside the row, token ids inside the
vocabulary; the model folder has `tokenizer.json` of that vocabulary and, for the MLCommons set,
`config.json` with Llama 2 70B's shape and every safetensors file its index lists, each as long as its own
header says (a cut-off download shows) and holding the tensors the index puts in it; the headers hold every
tensor config.json's Llama has, at its shape (what loading finds only minutes in); every file
`model/meta.json` recorded (downloads, and the sample's tokenizer and base model as they were written) has
its size and sampled blocks, and the small ones (up to 64 MiB: configs, tokenizers, the sample's model)
their sha256. Files without recorded sampled blocks (prepared before they were, or by AMD's or NVIDIA's
scripts) are named in a note. `--full` adds the checksums: the `.npy` md5s (for the MLCommons set, AMD's),
the shards' sha256 (minutes for 138 GB).
Exit status 1 names every problem.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from pathlib import Path

import numpy as np

from input_preprocessing.common.checksums import KEY, SKIPPED, file_hash, sampled_sha256
from input_preprocessing.llama2_70b_lora import govreport, layout, model

MAX_ROW_PROBLEMS = 5  # per file; then a count
MAX_SAFETENSORS_HEADER = 100 << 20
WHOLE_HASH_MAX = 64 << 20  # recorded files this small are hashed whole by the fast check too


def mlperf_meta() -> dict:
    """What a folder without meta.json must hold: the MLCommons set."""
    splits = {name: {**spec, "sequences": spec["rows"]} for name, spec in govreport.SPLITS.items()}
    return {
        "kind": "mlperf",
        "vocab_size": govreport.VOCAB_SIZE,
        "seq_length": govreport.SEQ_LENGTH,
        "splits": splits,
    }


def row_problems(row: object, seq_length: int, vocab_size: int) -> list[str]:
    if not isinstance(row, dict) or set(row) != set(layout.KEYS):
        keys = sorted(row) if isinstance(row, dict) else type(row).__name__
        return [f"keys {keys}, expected {list(layout.KEYS)}"]
    problems = []
    ids, mask = np.asarray(row["input_ids"]), np.asarray(row["loss_mask"])
    starts = np.asarray(row["seq_start_id"])
    for name, value in (("input_ids", ids), ("loss_mask", mask)):
        if value.shape != (seq_length,):
            problems.append(f"{name} has shape {value.shape}, expected ({seq_length},)")
    if ids.size and (ids.dtype.kind not in "iu" or ids.min() < 0 or ids.max() >= vocab_size):
        problems.append(
            f"input_ids outside the vocabulary [0, {vocab_size}) (min {ids.min()}, max {ids.max()})"
        )
    if mask.size and not np.isin(mask, (0, 1)).all():
        problems.append(
            f"loss_mask holds values other than 0 and 1: {sorted(set(mask.tolist()) - {0, 1})[:5]}"
        )
    if starts.ndim != 1 or not starts.size or starts.dtype.kind not in "iu":
        problems.append(f"seq_start_id is not a non-empty list of ints: {row['seq_start_id']!r}")
    elif starts[0] != 0 or (np.diff(starts) <= 0).any() or starts[-1] >= seq_length:
        problems.append(f"seq_start_id {starts.tolist()[:8]} is not increasing from 0 inside the row")
    return problems


def check_npy(path: Path, spec: dict, seq_length: int, vocab_size: int) -> list[str]:
    """Problems with one split's file: presence, size, header, rows, every row."""
    if not path.is_file():
        return [f"missing: {path}"]
    size = path.stat().st_size
    if spec.get("size") is not None and size != spec["size"]:
        return [f"{path}: {size:,} bytes, expected {spec['size']:,} (truncated or modified)"]
    if spec.get(KEY) and sampled_sha256(path) != spec[KEY]:
        return [f"{path}: sampled blocks differ from {layout.META} (modified in place or corrupt)"]
    try:
        shape, dtype, _ = layout.read_header(path)
    except (ValueError, OSError) as err:
        return [f"{path}: not a .npy file ({err})"]
    if dtype != np.dtype(object) or shape != (spec["rows"],):
        return [f"{path}: {dtype} array of shape {shape}, expected {spec['rows']} rows of packed sequences"]
    try:
        rows = layout.load_rows(path)
    except (EOFError, pickle.UnpicklingError, ValueError, OSError) as err:
        return [f"{path}: unreadable, truncated or corrupt ({type(err).__name__}: {err})"]
    problems, bad, has_target = [], 0, False
    for i, row in enumerate(rows):
        found = row_problems(row, seq_length, vocab_size)
        if found:
            bad += 1
            if bad <= MAX_ROW_PROBLEMS:
                problems += [f"{path}: row {i}: {p}" for p in found]
        elif not has_target:
            has_target = any(row["loss_mask"])
    if bad > MAX_ROW_PROBLEMS:
        problems.append(f"{path}: {bad - MAX_ROW_PROBLEMS} more rows with problems")
    if not bad and not has_target:
        problems.append(f"{path}: no token has loss_mask 1 (nothing to learn or evaluate)")
    return problems


def check_data(data_dir: Path, meta: dict, full: bool) -> list[str]:
    problems = []
    for spec in meta["splits"].values():
        problems += check_npy(data_dir / spec["file"], spec, meta["seq_length"], meta["vocab_size"])
    if full and not problems:
        md5s = {name: file_hash(data_dir / spec["file"]) for name, spec in meta["splits"].items()}
        for name, spec in meta["splits"].items():
            if spec.get("md5") and md5s[name] != spec["md5"]:
                problems.append(
                    f"{data_dir / spec['file']}: checksum mismatch: md5 {md5s[name]}, "
                    f"meta.json says {spec['md5']}"
                )
        combined = layout.directory_md5(md5s.values())
        if meta["kind"] == "mlperf" and combined != govreport.NPY_DIR_MD5:
            problems.append(
                f"{data_dir}: checksum mismatch: the .npy files' md5 is {combined}, "
                f"AMD's is {govreport.NPY_DIR_MD5}"
            )
    return problems


def check_safetensors(path: Path) -> tuple[list[str], dict[str, tuple[int, ...]]]:
    """(problems, tensor name -> shape) from a safetensors file's header: the file must be as long as it
    says."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        length = int.from_bytes(raw, "little") if len(raw) == 8 else -1
        if not 0 < length <= min(size - 8, MAX_SAFETENSORS_HEADER):
            return [f"{path}: {size:,} bytes, not a complete safetensors file (truncated?)"], {}
        try:
            header = json.loads(f.read(length))
            tensors = {k: tuple(int(n) for n in t["shape"]) for k, t in header.items() if k != "__metadata__"}
            end = max(
                (int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0
            )
        except (ValueError, KeyError, TypeError, IndexError) as err:
            return [f"{path}: unreadable safetensors header ({err})"], {}
    if size != 8 + length + end:
        return [
            f"{path}: {size:,} bytes, its header describes {8 + length + end:,} (truncated or modified)"
        ], {}
    return [], tensors


def check_weights(model_dir: Path, skip: set[str], expected: dict[str, tuple[int, ...]] | None) -> list[str]:
    """Every safetensors file the index lists (or model.safetensors) is complete and holds its tensors;
    files in `skip` already have a problem named. With `expected` (the tensors config.json's Llama has,
    `model.hf_tensors`), the headers hold each of them at its shape: what loading would find after minutes."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError) as err:
            return [f"{index}: unreadable ({err})"]
    elif (model_dir / "model.safetensors").is_file():
        weight_map = {}
    else:
        return [
            f"{model_dir}: no safetensors weights (model.safetensors.index.json or model.safetensors); a "
            "Hugging Face folder is read directly, a NeMo checkpoint (AMD's model_weights/) is not"
        ]
    files = sorted(set(weight_map.values())) if weight_map else ["model.safetensors"]
    problems, found = [], {}
    for name in sorted(set(files) - skip):
        path = model_dir / name
        if not path.is_file():
            problems.append(f"missing: {path} (listed in {index.name})")
            continue
        trouble, tensors = check_safetensors(path)
        missing = sorted(t for t, f in weight_map.items() if f == name and t not in tensors)
        if missing and not trouble:
            trouble = [f"{path}: lacks {len(missing)} tensors the index puts there (first: {missing[0]})"]
        problems += trouble
        found.update({tensor: (shape, name) for tensor, shape in tensors.items()})
    if expected is None or problems or skip & set(files):
        return problems  # the damage named already; the tensors of a damaged file are not known
    return tensor_problems(model_dir, found, expected)


def tensor_problems(model_dir: Path, found: dict, expected: dict[str, tuple[int, ...]]) -> list[str]:
    """The tensors config.json's model needs that the headers lack, and those of another shape."""
    problems = []
    missing = [name for name in expected if name not in found]
    if missing:
        problems.append(
            f"{model_dir}: the checkpoint lacks {len(missing)} tensor(s) that its config.json's "
            f"Llama has (first: {missing[0]}); loading it would fail"
        )
    wrong = [
        (name, found[name], shape)
        for name, shape in expected.items()
        if name in found and found[name][0] != shape
    ]
    for name, (shape, file), want in wrong[:MAX_ROW_PROBLEMS]:
        problems.append(
            f"{model_dir / file}: {name} has shape {list(shape)}, its config.json's Llama needs {list(want)}"
        )
    if len(wrong) > MAX_ROW_PROBLEMS:
        problems.append(f"{model_dir}: {len(wrong) - MAX_ROW_PROBLEMS} more tensors of another shape")
    return problems


def check_recorded(model_dir: Path, full: bool) -> dict[str, str]:
    """{file: problem} for the files model/meta.json recorded when they were downloaded or written: present
    at their size, their sampled blocks, and their sha256 with `full` or when they are small (the sample's
    model, every config and tokenizer file: hashed whole in milliseconds)."""
    meta = model.read_meta(model_dir)
    how = "written" if meta.get("source") == model.SAMPLE_SOURCE else "downloaded"
    problems = {}
    for name, rec in meta.get("files", {}).items():
        path = model_dir / name
        if not path.is_file():
            problems[name] = f"missing: {path} ({how} before, per {model.META})"
        elif path.stat().st_size != rec["size"]:
            size = path.stat().st_size
            problems[name] = f"{path}: {size:,} bytes, {rec['size']:,} when {how} (truncated or modified)"
        elif rec.get(KEY) and sampled_sha256(path) != rec[KEY]:
            problems[name] = f"{path}: sampled blocks differ from {model.META} (modified in place or corrupt)"
        elif (
            rec.get("sha256")
            and (full or rec["size"] <= WHOLE_HASH_MAX)
            and file_hash(path, "sha256") != rec["sha256"]
        ):
            problems[name] = (
                f"{path}: checksum mismatch: sha256 differs from the one recorded when it was "
                f"{how} (modified in place or corrupt)"
            )
    return problems


def check_model(model_dir: Path, meta: dict, full: bool) -> list[str]:
    if not model_dir.is_dir():
        return [f"missing: {model_dir} (the model folder: weights and tokenizer)"]
    recorded = check_recorded(model_dir, full)
    problems = list(recorded.values())
    tokenizer = model_dir / "tokenizer.json"
    if "tokenizer.json" in recorded:
        pass
    elif not tokenizer.is_file():
        problems.append(f"missing: {tokenizer}")
    else:
        from tokenizers import Tokenizer

        try:
            vocab = Tokenizer.from_file(str(tokenizer)).get_vocab_size(with_added_tokens=True)
        except Exception as err:  # noqa: BLE001 - tokenizers raises plain Exceptions for a bad file
            vocab = None
            problems.append(f"{tokenizer}: unreadable ({err})")
        if vocab is not None and vocab != meta["vocab_size"]:
            problems.append(f"{tokenizer}: {vocab} tokens, the data was made with {meta['vocab_size']}")
    config_path = model_dir / "config.json"
    if not config_path.is_file():
        if meta["kind"] == "mlperf" and "config.json" not in recorded:
            problems.append(f"missing: {config_path} (the Llama 2 70B weights are not there)")
        return problems
    try:
        config = json.loads(config_path.read_text())
    except ValueError as err:
        return [*problems, f"{config_path}: unreadable ({err})"]
    if meta["kind"] == "mlperf":
        problems += [
            f"{config_path}: {key} is {config.get(key)!r}, Llama 2 70B's is {value!r}"
            for key, value in model.SHAPE.items()
            if config.get(key) != value
        ]
    elif config.get("vocab_size", 0) < meta["vocab_size"]:
        problems.append(
            f"{config_path}: vocab_size {config.get('vocab_size')} < the data's {meta['vocab_size']}"
        )
    try:
        expected = model.hf_tensors(config)
    except (KeyError, TypeError) as err:
        return [*problems, f"{config_path}: no {err} (a Hugging Face Llama config)"]
    return problems + check_weights(model_dir, set(recorded), expected)


def data_folder(datadir: Path) -> Path:
    """The folder holding train.npy and validation.npy: DATADIR/data (ours, AMD's), or DATADIR itself where
    the rows lie there and not in data/ (NVIDIA's gov_report/). As the trainer's `folders.data_dir`."""
    nested = datadir / "data"
    return datadir if not (nested / "train.npy").is_file() and (datadir / "train.npy").is_file() else nested


def nemo_checkpoint_problem(folder: Path) -> str | None:
    """One line naming the command that gets the Hugging Face safetensors, when `folder` holds a NeMo
    checkpoint instead (AMD's prepare_data_and_model.sh leaves model_weights/ and model_config.yaml, v5.0 also
    llama2-70b.nemo; NVIDIA's NeMo 2 import leaves context/ and weights/*.distcp); None otherwise. The same
    line as the trainer's preflight (`training/llama2_70b_lora/folders.py`), which runs this verifier as a
    command next and prints it once: written twice because input_preprocessing/ imports no training
    benchmark (tests/test_layering.py), and tests/llama2_70b_lora_data/test_their_layouts.py checks that the
    two agree."""
    hf = (folder / "model.safetensors.index.json").is_file() or (folder / "model.safetensors").is_file()
    marks = ["model_weights/"] if (folder / "model_weights").is_dir() else []
    marks += sorted(p.name for p in (*folder.glob("*.nemo"), *folder.glob("model_config.yaml")))
    if (folder / "context").is_dir() and any((folder / "weights").glob("*.distcp")):
        marks += ["context/", "weights/*.distcp"]
    if hf or not marks:
        return None
    command = "HF_TOKEN=... ./input_preprocessing/llama2_70b_lora/prepare_data.sh"
    return (
        f"{folder} holds a NeMo checkpoint ({', '.join(marks)}), not the Hugging Face safetensors this "
        f"toolkit reads: get them with {command} --outputdir {folder.parent} (writes "
        f"{folder.parent / 'model'}, keeps the data beside it)"
    )


def verify(datadir: Path, full: bool = False, model_folder: Path | None = None) -> list[str]:
    """Every problem with DATADIR (empty: fine): its rows where our, AMD's or NVIDIA's layout keeps them, its
    model in `model_folder` (MODEL) or DATADIR/model; only one, naming the command to run, when
    the model folder holds a NeMo checkpoint."""
    model_dir = model_folder if model_folder is not None else datadir / "model"
    nemo = nemo_checkpoint_problem(model_dir)
    if nemo:
        return [nemo]
    data_dir = data_folder(datadir)
    if not data_dir.is_dir():
        return [f"missing: {data_dir} (DATADIR holds data/ and model/, or the rows with MODEL set)"]
    if data_dir == datadir and model_folder is None and not model_dir.is_dir():
        return [
            f"{datadir} holds the rows themselves (NVIDIA's gov_report/): set MODEL to the Hugging Face "
            "checkpoint's folder, or make DATADIR the folder holding data/ and model/"
        ]
    try:
        meta = layout.read_meta(data_dir) or mlperf_meta()
    except ValueError as err:
        return [str(err)]
    if meta["kind"] == "mlperf":
        meta = {**meta, **mlperf_meta()}
    return check_data(data_dir, meta, full) + check_model(model_dir, meta, full)


def unsampled(datadir: Path, model_folder: Path | None = None) -> list[str]:
    """The data and model files whose sampled blocks no meta.json records."""
    try:
        meta = layout.read_meta(data_folder(datadir)) or mlperf_meta()
    except ValueError:
        return []
    names = [f"data/{spec['file']}" for spec in meta["splits"].values() if not spec.get(KEY)]
    recorded = model.read_meta(model_folder or datadir / "model").get("files", {})
    return names + [f"model/{name}" for name, rec in recorded.items() if not rec.get(KEY)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m input_preprocessing.llama2_70b_lora.verify",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("datadir", type=Path, help="the folder holding data/ and model/ (DATADIR)")
    parser.add_argument(
        "--full", action="store_true", help="also the checksums (the shards' sha256: minutes)"
    )
    parser.add_argument(
        "--preflight", action="store_true", help="as the benchmark's preflight runs it (fast)"
    )
    parser.add_argument(
        "--model",
        type=Path,
        default=os.environ.get("MODEL") or None,
        help="the Hugging Face checkpoint's folder (default: $MODEL, else DATADIR/model)",
    )
    args = parser.parse_args(argv)
    problems = verify(args.datadir, args.full, args.model)
    for problem in problems:
        print(f"verify: {problem}", file=sys.stderr)
    skipped = [] if args.full else unsampled(args.datadir, args.model)
    if skipped:
        print(f"verify: note: no sampled-block checksums recorded for {', '.join(skipped)}: {SKIPPED}")
    print(
        f"verify: {args.datadir}: {'FAILED' if problems else 'OK'} ({'full' if args.full else 'fast'} check)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
