"""Shared fixtures: a small sample in the published layout (made once), one CPU thread."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("diffusers", reason="diffusers builds FLUX.1's transformer")


@pytest.fixture(autouse=True)
def one_thread():
    """Two OpenMP threads on a busy 2-core machine are much slower than one for these tiny shapes."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def sample_data(tmp_path_factory) -> Path:
    """`prepare_data.sh --sample`'s layout at a tenth of its rows."""
    from input_preprocessing.flux1.sample import make_sample

    out = tmp_path_factory.mktemp("flux_demo")
    make_sample(out, train_rows=512, valid_rows=64)
    return out
