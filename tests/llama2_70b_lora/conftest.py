"""Shared fixtures: the CPU default's DATADIR as `prepare_data.sh --sample --seq-len 256` writes it.

Preparing it pretrains the tiny base model (the most of a minute and a half on 2 cores), so it is made once
per session and kept in the tests' cache (tests/containers/small_default.py's CACHE, as BERT's prepared data
is) under the hash of the code that makes it: another checkout or session with the same code reuses it, a
change to that code makes it anew. Tests read it and never write into it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.containers.small_default import CACHE, REPO, _tree_hash

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
    key = _tree_hash(*(REPO / m for m in MAKERS))
    out = CACHE / f"lora_demo-{key}-torch{torch.__version__}-seq{SEQ_LEN}"
    if out.is_dir():  # renamed into place whole, below
        return out
    tmp = out.with_name(out.name + f".partial{os.getpid()}")
    subprocess.run(["rm", "-rf", str(tmp)], check=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    prep = prepare_sample(tmp)
    assert prep.returncode == 0, prep.stdout[-3000:] + prep.stderr[-3000:]
    if not out.exists():
        tmp.rename(out)
    return out
