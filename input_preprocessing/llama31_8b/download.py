"""Llama 3.1 8B's download: MLCommons' preprocessed C4 into OUTPUTDIR/data and MLCommons' Llama 3.1 8B
tokenizer dataset into OUTPUTDIR/model, with MLCommons' R2 downloader (pinned:
input_preprocessing/common/r2.py), as AMD's README runs it (`cd OUTPUTDIR; ... -d data <c4>.uri;
... -d model <tokenizer>.uri`).

    python -m input_preprocessing.llama31_8b.download --outputdir DIR [--no-disk-check]

Before anything is fetched, the free disk under OUTPUTDIR is checked against what is still to come of both
datasets: their sizes as the bucket reports them (`r2.remote_bytes`), else the figures below, less what is
already there (a rerun resumes: wget --continue). The tokenizer dataset is not small: it is the whole
Meta-Llama-3.1-8B repository, the weights included, twice (the safetensors shards and Meta's original
`consolidated.00.pth`): NVIDIA's cleanup_8b.sh deletes `config.json`, `generation_config.json`,
`model*.safetensors*` and `original/` from it after the download. Both are kept here, as in AMD's layout
(MODEL=.../model is mounted whole); the trainer reads only the tokenizer files.
`DATASET_URI` and `TOKENIZER_URI` replace the datasets' metadata URLs (mirrors, tests).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from input_preprocessing.common import r2
from input_preprocessing.common.runtime import PrepError, check_free_disk, log

METADATA = "https://training.mlcommons-storage.org/metadata"
DATASET_URI = f"{METADATA}/llama-3-1-8b-preprocessed-c4-dataset.uri"
TOKENIZER_URI = f"{METADATA}/llama-3-1-8b-tokenizer.uri"
# Every file of the C4 dataset (LICENSE.txt, NOTICE.txt, the train and validation .bin/.idx, the md5 list),
# from NVIDIA's expected-mounts-8b.csv (v5.1 NVIDIA/benchmarks/llama31_8b/implementations/nemo): 85.06 GB.
C4_BYTES = 85_057_360_648
# The tokenizer dataset, estimated: the tokenizer files (9,190,340 bytes, the same CSV) and Llama 3.1 8B's
# 8,030,261,248 BF16 parameters twice (safetensors, original/consolidated.00.pth): 32.13 GB. No byte count of
# the weights' files is published where this was written.
TOKENIZER_DATASET_BYTES = 9_190_340 + 2 * 2 * 8_030_261_248


def _bytes_under(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def downloads(environ=os.environ) -> list[tuple[str, str, int, str]]:
    """(folder under OUTPUTDIR, metadata URL, bytes if the bucket does not say, what that figure is)."""
    return [
        ("data", environ.get("DATASET_URI") or DATASET_URI, C4_BYTES, "NVIDIA's expected-mounts-8b.csv"),
        (
            "model",
            environ.get("TOKENIZER_URI") or TOKENIZER_URI,
            TOKENIZER_DATASET_BYTES,
            "an estimate: the tokenizer and the 8B weights twice",
        ),
    ]


def check_disk(outputdir: Path, environ=os.environ) -> None:
    """Refuse, naming the folder, the free and the needed bytes, when what is still to come of both datasets
    does not fit."""
    needed, sources = 0, []
    for folder, uri, fallback, what in downloads(environ):
        size = r2.remote_bytes(uri)
        needed += max(0, (fallback if size is None else size) - _bytes_under(outputdir / folder))
        sources.append(f"{folder}/: {'the bucket' if size is not None else what}")
    check_free_disk(
        outputdir, needed, f"MLCommons' C4 and Llama 3.1 8B tokenizer datasets ({'; '.join(sources)})"
    )


def download(outputdir: Path, disk_check: bool = True, environ=os.environ) -> None:
    """Both datasets into `outputdir`, each resumed where it stopped and checked by the downloader."""
    outputdir.mkdir(parents=True, exist_ok=True)
    if disk_check:
        check_disk(outputdir, environ)
    with tempfile.TemporaryDirectory() as tmp:
        script = r2.downloader(Path(tmp), environ)
        for folder, uri, _, _ in downloads(environ):
            log(f"[download] {uri} -> {outputdir / folder}")
            proc = subprocess.run(
                ["bash", str(script), "-d", folder, uri], cwd=outputdir, stdin=subprocess.DEVNULL
            )
            if proc.returncode != 0:
                raise PrepError(
                    f"MLCommons' R2 downloader failed for {uri} (exit {proc.returncode}); run again to resume"
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m input_preprocessing.llama31_8b.download",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--outputdir", type=Path, required=True, help="gets data/ and model/")
    parser.add_argument("--no-disk-check", action="store_true", help="skip the free-disk check")
    args = parser.parse_args(argv)
    try:
        download(args.outputdir.resolve(), not args.no_disk_check)
    except PrepError as err:
        print(f"prepare_data.sh: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
