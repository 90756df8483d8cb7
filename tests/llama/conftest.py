"""Shared fixtures: the demo data from the bundled Wikipedia excerpt (built once), one CPU thread."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core reads and writes the indexed datasets")


@pytest.fixture(autouse=True)
def one_thread():
    """Two OpenMP threads on a busy 2-core machine are ~10x slower than one for these tiny shapes."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory) -> Path:
    """`prepare_data.sh --sample`'s output: wiki-{train,validation}_text_document.{bin,idx} + tokenizer/."""
    from input_preprocessing.llama31_8b.sample import make_sample

    out = tmp_path_factory.mktemp("llama_demo")
    make_sample(out, valid_tokens=1024 * 64 + 1)
    return out
