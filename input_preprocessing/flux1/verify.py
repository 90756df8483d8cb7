"""Check prepared Flux.1 data: the three folders of the published layout (`layout.py`) and what the trainer
relies on in them.

    python -m input_preprocessing.flux1.verify DATADIR [--preflight]

Each split opens as a Hugging Face `datasets` folder with the published columns; its first and last rows
decode to tensors of one layout (T5 [T, D], pooled CLIP [P], the posterior's mean and log-variance [C, H, W]
with H and W even), the same in both splits and matching the empty encodings; every validation row has a
timestep 0..7, each equally often (the score is then the mean of the 8 per-timestep means). The row counts
are reported against the published ones (1,099,776 and 29,696): a smaller set (the CPU sample) is said to be
one, not refused. The downloader has checked every file's MD5 as it fetched it. With `--preflight` (as the
benchmark's preflight runs it) the folders are the run's: TRAIN_DATA, VAL_DATA and EMPTY_ENCODINGS from the
environment where set. Exit status 1 names every problem.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from input_preprocessing.flux1 import layout


def split_problems(folder: Path, validation: bool) -> tuple[list[str], dict | None, int]:
    """(problems, the shapes of its tensors, its rows) of one split."""
    if not folder.is_dir():
        return [f"missing: {folder} (the published {folder.name} folder)"], None, 0
    try:
        table = layout.read_split(folder)
    except (OSError, ValueError, KeyError) as err:
        return [f"{folder}: cannot be read as a datasets folder of Arrow files ({err})"], None, 0
    absent = [c for c in layout.TENSORS if c not in table.column_names]
    if absent:
        return [f"{folder}: no column {', '.join(absent)} (has {', '.join(table.column_names)})"], None, 0
    if table.num_rows == 0:
        return [f"{folder}: no rows"], None, 0
    problems, shapes = [], None
    for row in sorted({0, table.num_rows - 1}):
        try:
            got = {c: layout.npy_shape(table.column(c)[row].as_py()) for c in layout.TENSORS}
        except (ValueError, TypeError) as err:
            problems.append(f"{folder}: row {row} does not decode ({err})")
            continue
        shapes = shapes or got
        if got != shapes:
            problems.append(f"{folder}: row {row} has shapes {got}, row 0 {shapes}")
    if shapes:
        t5, clip, mean, logvar = (shapes[c] for c in layout.TENSORS)
        if len(t5) != 2 or len(clip) != 1 or len(mean) != 3 or mean != logvar or mean[1] % 2 or mean[2] % 2:
            problems.append(
                f"{folder}: shapes {shapes}: expected T5 [T, D], CLIP [P], mean = logvar [C, H, W], "
                "H and W even"
            )
    if validation:
        if "timestep" not in table.column_names:
            problems.append(f"{folder}: no timestep column (each validation sample is tagged 0..7)")
        else:
            steps = table.column("timestep").to_pylist()
            counts = Counter(steps)
            bad = sorted({s for s in counts if s is None or not 0 <= s < layout.EVAL_TIMESTEPS}, key=str)
            if bad:
                problems.append(f"{folder}: timesteps {bad} outside 0..{layout.EVAL_TIMESTEPS - 1}")
            elif len(set(counts.values())) != 1 or len(counts) != layout.EVAL_TIMESTEPS:
                problems.append(
                    f"{folder}: the timesteps are not equally frequent ({dict(sorted(counts.items()))})"
                )
    return problems, shapes, table.num_rows


def verify(train: Path, valid: Path, empty: Path) -> tuple[list[str], list[str]]:
    """(problems, notes) of the three folders."""
    problems, notes = [], []
    p_train, s_train, n_train = split_problems(train, validation=False)
    p_valid, s_valid, n_valid = split_problems(valid, validation=True)
    problems += p_train + p_valid
    if s_train and s_valid and s_train != s_valid:
        problems.append(f"{train} has tensors {s_train}, {valid} {s_valid}: not one encoder set")
    empties = []
    for name in layout.EMPTY_FILES:
        path = empty / name
        if not path.is_file():
            problems.append(f"missing: {path} (the published empty encodings)")
            continue
        empties.append(np.load(path, mmap_mode="r").shape)
    if s_train and len(empties) == 2:
        want = ((1, *s_train["t5_encodings"]), (1, *s_train["clip_encodings"]))
        if tuple(empties) != want:
            problems.append(f"{empty}: shapes {empties}, the data's encodings need {list(want)}")
    for split, rows in ((train, n_train), (valid, n_valid)):
        published = layout.PUBLISHED_ROWS[layout.TRAIN if split is train else layout.VALID]
        if rows and rows != published:
            notes.append(
                f"{split}: {rows} rows, not the published {published:,}: a sample, not MLPerf's data"
            )
    return problems, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m input_preprocessing.flux1.verify",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("datadir", type=Path)
    parser.add_argument("--preflight", action="store_true", help="the run's folders (TRAIN_DATA, ...)")
    args = parser.parse_args(argv)
    env = os.environ if args.preflight else {}
    train = Path(env.get("TRAIN_DATA") or args.datadir / layout.TRAIN)
    valid = Path(env.get("VAL_DATA") or args.datadir / layout.VALID)
    empty = Path(env.get("EMPTY_ENCODINGS") or args.datadir / layout.EMPTY)
    problems, notes = verify(train, valid, empty)
    for note in notes:
        print(f"verify: note: {note}")
    for problem in problems:
        print(f"verify: {problem}", file=sys.stderr)
    if not problems:
        print(f"verify: {args.datadir}: Flux.1 data OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
