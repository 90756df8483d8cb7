"""Shared fixtures: the CPU default's DATADIR as `prepare_data.sh --sample --seq-len 256` writes it.

Preparing it pretrains the tiny base model (the most of a minute and a half on 2 cores), so it is made once
and kept in the tests' cache (`tests.cache`, as BERT's prepared data is) under the hash of the code that
makes it: another checkout, session or pytest worker with the same code reuses it, a change to that code
makes it anew. Tests read it and never write into it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.cache import REPO, cached, tree_hash

SEQ_LEN = 256  # the CPU default's MAX_SEQLEN (configs/llama2_70b_lora/config_CPU_1x1x1.sh)
# what the sample and its base model are made by: the preparation and the Llama code it pretrains with
MAKERS = ("input_preprocessing", "training/llama", "training/common")


def prepare_sample(out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "BENCHMARK": "llama2_70b_lora", "PYTHON": sys.executable}
    argv = ["bash", "input_preprocessing/prepare_data.sh", "--outputdir", str(out), "--sample"]
    return subprocess.run(
        [*argv, "--seq-len", str(SEQ_LEN)], env=env, cwd=REPO, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="session")
def lora_demo_data() -> Path:
    """The CPU default's prepared data and base model (data/, model/), made by prepare_data.sh once."""

    def build(out: Path) -> None:
        prep = prepare_sample(out)
        assert prep.returncode == 0, prep.stdout[-3000:] + prep.stderr[-3000:]

    key = tree_hash(*(REPO / m for m in MAKERS))
    return cached(f"lora_demo-{key}-torch{torch.__version__}-seq{SEQ_LEN}", build)
