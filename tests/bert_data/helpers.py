"""Helpers for the BERT data-preparation tests: text inputs built from the bundled Wikipedia sample, running
the pipeline, and fingerprinting its output."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

from input_preprocessing.bert import wiki
from input_preprocessing.bert.flags import SAMPLE_DIR
from input_preprocessing.bert.prepare import main

REPO = Path(__file__).resolve().parents[2]
DUMP = SAMPLE_DIR / "enwiki_sample.xml.bz2"
VOCAB = SAMPLE_DIR / "bert_uncased_vocab.txt"


def sample_articles() -> list[str]:
    """The sample dump's articles as text (a sentence per line), in dump order."""
    return [a for _, text, ns in wiki.iter_pages(DUMP) if (a := wiki.article_text(text, frozenset(ns)))]


def write_text_dir(folder: Path, articles: list[str], parts: int, eval_articles: int) -> Path:
    """MLCommons' text layout: `parts` part files and eval.txt (the last `eval_articles` articles)."""
    folder.mkdir(parents=True, exist_ok=True)
    train, held_out = articles[:-eval_articles], articles[-eval_articles:]
    for k in range(parts):
        chunk = train[k::parts]
        (folder / f"part-{k:05d}-of-{parts:05d}").write_text("".join(a + "\n\n" for a in chunk))
    (folder / "eval.txt").write_text("".join(a + "\n\n" for a in held_out))
    return folder


def prepare(*args: str) -> int:
    """Run the pipeline in this process (as prepare_data.sh would)."""
    return main([str(a) for a in args])


def prepare_subprocess(*args: str) -> subprocess.CompletedProcess:
    """Run prepare_data.sh as a user would, in a child process."""
    env = {**os.environ, "PYTHON": sys.executable}
    cmd = [str(REPO / "input_preprocessing" / "prepare_data.sh"), *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def content_digest(path: Path) -> str:
    """sha256 over an HDF5 file's dataset names and values (independent of the HDF5 library's byte layout)."""
    h = hashlib.sha256()
    with h5py.File(path, "r") as f:
        for name in sorted(f):
            h.update(name.encode())
            for row in f[name][:]:
                h.update(np.ascontiguousarray(row).tobytes())
                h.update(b"|")
    return h.hexdigest()


def data_digests(root: Path) -> dict[str, str]:
    """Content digests of every HDF5 output of a prepared folder, by relative path."""
    return {
        p.relative_to(root).as_posix(): content_digest(p)
        for p in sorted((root / "hdf5").rglob("*"))
        if p.is_file()
    }
