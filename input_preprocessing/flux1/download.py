"""Flux.1's download: MLCommons' preprocessed CC12M and COCO sets and the empty caption's encodings, with
MLCommons' R2 downloader (pinned: input_preprocessing/common/r2.py), as the reference's README and AMD's run
it (`cd /dataset; bash mlc-r2-downloader.sh <uri>` for each of the three).

    python -m input_preprocessing.flux1.download --outputdir DIR [--no-disk-check]

Before anything is fetched, the free disk under OUTPUTDIR is checked against what is still to come: each
set's size as the bucket reports it (`r2.remote_bytes`), else the size its published layout gives (rows x
the bytes of one row's stored tensors), less what is already under OUTPUTDIR (a rerun resumes: the
downloader's wget --continue, then its MD5 check of every file). Afterwards each of `cc12m_preprocessed/`,
`coco_preprocessed/` and `empty_encodings/` must be found under OUTPUTDIR (at the top, or in the folder the
downloader named after the dataset, which is then linked to the top): the layout the trainer reads with
DATADIR=OUTPUTDIR. `CC12M_URI`, `COCO_URI` and `EMPTY_URI` replace the metadata URLs (mirrors, tests).
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
from input_preprocessing.flux1 import layout

METADATA = "https://training.mlcommons-storage.org/metadata"
NPY_HEADER = 128  # np.save's header for these arrays (format 1.0, padded to 64 bytes)
T5_SHAPE, CLIP_WIDTH, LATENT_SHAPE = (256, 4096), 768, (16, 32, 32)  # the reference's encoders at 256x256


def npy_bytes(*shape: int, itemsize: int = 2) -> int:
    n = itemsize
    for d in shape:
        n *= d
    return n + NPY_HEADER


# One row's stored tensors (bfloat16), the key and Arrow's offsets not counted: 2,164,736 bytes
ROW_BYTES = npy_bytes(*T5_SHAPE) + npy_bytes(CLIP_WIDTH) + 2 * npy_bytes(*LATENT_SHAPE)
EMPTY_BYTES = npy_bytes(1, *T5_SHAPE) + npy_bytes(1, CLIP_WIDTH)  # float16


def downloads(environ=os.environ) -> list[tuple[str, str, int]]:
    """(the folder it holds, metadata URL, bytes its layout gives)."""
    return [
        (
            layout.TRAIN,
            environ.get("CC12M_URI") or f"{METADATA}/flux-1-cc12m-preprocessed.uri",
            layout.PUBLISHED_ROWS[layout.TRAIN] * ROW_BYTES,
        ),
        (
            layout.VALID,
            environ.get("COCO_URI") or f"{METADATA}/flux-1-coco-preprocessed.uri",
            layout.PUBLISHED_ROWS[layout.VALID] * ROW_BYTES,
        ),
        (layout.EMPTY, environ.get("EMPTY_URI") or f"{METADATA}/flux-1-empty-encodings.uri", EMPTY_BYTES),
    ]


def _bytes_under(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def check_disk(outputdir: Path, environ=os.environ) -> None:
    """Refuse, naming the folder, the free and the needed bytes, when what is still to come does not fit."""
    total, sources = 0, []
    for folder, uri, estimate in downloads(environ):
        size = r2.remote_bytes(uri)
        total += estimate if size is None else size
        sources.append(f"{folder}: {'the bucket' if size is not None else 'its published layout'}")
    needed = max(0, total - _bytes_under(outputdir))
    check_free_disk(outputdir, needed, f"MLCommons' Flux.1 datasets ({'; '.join(sources)})")


def place(outputdir: Path) -> None:
    """Each of the three folders at OUTPUTDIR's top: where the downloader put it deeper (in a folder named
    after the dataset), a relative link to it."""
    for name in (layout.TRAIN, layout.VALID, layout.EMPTY):
        top = outputdir / name
        if top.exists():
            continue
        found = sorted(p for p in outputdir.glob(f"*/{name}") if p.is_dir())
        found += sorted(p for p in outputdir.glob(f"*/*/{name}") if p.is_dir())
        if len(found) != 1:
            where = ", ".join(str(p) for p in found) or "nowhere"
            raise PrepError(
                f"after the download, {name}/ is found {where} under {outputdir}; expected "
                f"exactly one (move it to {top})"
            )
        top.symlink_to(found[0].relative_to(outputdir))
        log(f"[download] {top} -> {found[0]}")


def download(outputdir: Path, disk_check: bool = True, environ=os.environ) -> None:
    """The three sets into `outputdir`, each resumed where it stopped and checked by the downloader."""
    outputdir.mkdir(parents=True, exist_ok=True)
    if disk_check:
        check_disk(outputdir, environ)
    with tempfile.TemporaryDirectory() as tmp:
        script = r2.downloader(Path(tmp), environ)
        for folder, uri, _ in downloads(environ):
            log(f"[download] {uri} -> {outputdir} ({folder})")
            proc = subprocess.run(["bash", str(script), uri], cwd=outputdir, stdin=subprocess.DEVNULL)
            if proc.returncode != 0:
                raise PrepError(
                    f"MLCommons' R2 downloader failed for {uri} (exit {proc.returncode}); run again to resume"
                )
    place(outputdir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m input_preprocessing.flux1.download",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--outputdir", type=Path, required=True)
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
