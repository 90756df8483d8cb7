"""Llama 2 70B LoRA data and model preparation (what `prepare_data.sh` runs in the llama70b image).

    ./input_preprocessing/prepare_data.sh --outputdir /data               # GovReport + Llama 2 70B (HF_TOKEN)
    ./input_preprocessing/prepare_data.sh --outputdir /data --sample --seq-len 256  # the CPU default's data

Full: the MLCommons GovReport set from Hugging Face (the parquet revision AMD and NVIDIA pin, checked with
AMD's md5) into OUTPUTDIR/data/{train,validation}.npy (checked with AMD's md5; NVIDIA's sizes), and the
Llama 2 70B safetensors shards, config and tokenizer into OUTPUTDIR/model (each file checked against the
Hub's size and sha256). About 139 GB; free space is checked first. Gated weights: export HF_TOKEN from an
account that accepted Meta's licence at https://huggingface.co/meta-llama/Llama-2-70b-hf. Downloads resume;
what is already there and verified is skipped (a re-run of a finished folder downloads nothing).
Sample: see `sample.py`. Then: export DATADIR=OUTPUTDIR.
"""

# The flags alone, importing nothing outside Python's standard library, so that `prepare_data.sh --help`
# answers before numpy and the Hugging Face libraries are installed; `prepare.main` checks how they combine.
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def parser() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(
        prog="prepare_data.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = flags.add_argument
    add("--outputdir", type=Path, required=True, help="gets data/ and model/ (the run's DATADIR)")
    add("--sample", action="store_true", help="the CPU default's data from the bundled excerpt")
    add("--seq-len", type=int, help="--sample: tokens per packed row (default 8192)")
    add("--tokenizer", type=Path, help="--sample: a Hugging Face tokenizer folder (default: trained)")
    add("--one-per-row", action="store_true", help="--sample: one example a row, padded, as GovReport's rows")
    add("--model-revision", default="main", help="the Llama 2 70B revision (default: main)")
    add("--no-disk-check", action="store_true", help="skip the free-space check")
    add(
        "--base-steps",
        type=int,
        default=300,
        help="--sample: pretraining steps of the tiny base model written to model/ (0: none)",
    )
    return flags


if __name__ == "__main__":
    parser().parse_args(sys.argv[1:])  # --help (exit 0) or a refused flag (exit 2); nothing else runs here
