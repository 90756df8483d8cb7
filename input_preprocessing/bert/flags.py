"""Prepare MLPerf BERT's data: `prepare_data.sh --outputdir DIR [--packed-data]` runs `prepare.py` with these
flags.

    python -m input_preprocessing.bert.prepare --outputdir /bert_data --packed-data
    python -m input_preprocessing.bert.prepare --outputdir /tmp/bert_demo --packed-data --shards 8 \\
        --wiki-dump input_preprocessing/bert/sample/enwiki_sample.xml.bz2 --eval-samples 1500

Stages, in order, each resumable (a stage that finished is skipped; inside a stage every output file is
written atomically and skipped when present, so a killed run picks up where it stopped):
  inputs      MLCommons' files downloaded with its R2 downloader and checked (or local text: --wiki-dump DUMP
              or --text-dir DIR); R2_DOWNLOADER=/path/to/mlc-r2-downloader.sh uses a local copy of the script
  examples    per text part: tokenize, build masked-LM/next-sentence examples (seed 12345, dupe factor 10)
  eval        eval.txt's examples, 10,000 picked evenly -> hdf5/eval_varlength/part_eval_10k.hdf5
  plan        rows (packed: up to 3 sequences in 512 tokens, or --max-seq-length) and their shards, seed 12345
  scatter     per part: sequences reordered by destination shard
  shards      hdf5/packed_data/part_NNNNN (or, unpacked, hdf5/training-N/hdf5_N_shards_varlength_shuffled/)
  checkpoint  phase1/model.ckpt-28252 (TF1) -> phase1/model.ckpt-28252.pt
  manifest    manifest.json (path, size, sha256, samples of every output file), then `verify` on it
Intermediates live in DIR/work (removed at the end unless --keep-work); markers and settings in DIR/.prep.

This module imports nothing outside Python's standard library, so `prepare_data.sh --help` answers before
numpy, h5py and tokenizers are installed (`python -m input_preprocessing.bert.flags --help`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SAMPLE_DIR = Path(__file__).resolve().parent / "sample"
SAMPLE_VOCAB = SAMPLE_DIR / "bert_uncased_vocab.txt"


def _kill_after(text: str) -> tuple[str, int]:
    stage, _, n = text.partition(":")
    return stage, int(n)


def parser() -> argparse.ArgumentParser:
    """The flags of `prepare_data.sh`; `prepare.parse_args` checks how they combine."""
    flags = argparse.ArgumentParser(
        prog="prepare_data.sh",
        description="Prepare MLPerf BERT data: phase1 checkpoint, eval set, training shards.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2].rsplit("\n\n", 1)[0],
    )
    add = flags.add_argument
    add("-o", "--outputdir", type=Path, required=True, help="where the data goes (e.g. /bert_data)")
    add("-s", "--skip-download", action="store_true", help="MLCommons' inputs are already in OUTPUTDIR")
    add("-p", "--shards", type=int, default=4320, help="training shards (default 4320)")
    add("-c", "--packed-data", action="store_true", help="pack up to 3 sequences per 512-token row")
    add("--wiki-dump", type=Path, help="local text instead: made from this pages-articles .xml[.bz2]")
    add("--text-dir", type=Path, help="local text instead: part-* files and eval.txt in this folder")
    add("--vocab", type=Path, help=f"vocabulary for local text (default: the bundled {SAMPLE_VOCAB.name})")
    add("--tf-checkpoint", type=Path, help="TF1 checkpoint prefix to convert, with local text")
    add("--eval-samples", type=int, default=10_000, help="eval samples to pick (default 10000)")
    add("--eval-articles", type=int, help="articles held out for eval from --wiki-dump (default 10%%)")
    add("--max-seq-length", type=int, help="tokens per sequence (default 512); local text only")
    add("--max-predictions-per-seq", type=int, help="masked tokens per sequence (default 76); local text")
    add("-j", "--jobs", type=int, help="worker processes (default: CPUs, fewer if memory is short)")
    add("--metadata-url", help=argparse.SUPPRESS)  # MLCommons' metadata folder (download.py's by default)
    add("--keep-work", action="store_true", help="keep OUTPUTDIR/work (intermediates)")
    add("--no-disk-check", action="store_true", help="skip the free-disk check")
    add("--debug-kill-after", type=_kill_after, help=argparse.SUPPRESS)  # STAGE:N, for the resume test
    return flags


if __name__ == "__main__":
    parser().parse_args(sys.argv[1:])  # --help (exit 0) or a refused flag (exit 2); nothing else runs here
