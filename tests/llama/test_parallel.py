"""FSDP2 and DTensor tensor parallelism on CPU with gloo processes (DP 2, TP 2, and both on 4 processes):
the same losses and weights as one process training on the whole batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.llama import parallel_worker as worker

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def reference():
    model = worker.full_model()
    losses = worker.train(model, lambda t: t, accum=1)
    return losses, {k: v.detach().clone() for k, v in model.named_parameters()}


@pytest.mark.parametrize(
    "dp, tp, accum, reshard",
    [(2, 1, 2, "1"), (2, 1, 2, "0"), (1, 2, 1, "1"), (2, 2, 2, "1")],
    ids=["fsdp2-dp2-accum2", "fsdp2-dp2-accum2-kept-gathered", "tp2", "fsdp2-dp2-x-tp2"],
)
def test_two_process_training_matches_single_process(tmp_path, reference, dp, tp, accum, reshard):
    out = tmp_path / "result.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RESHARD_AFTER_FORWARD": reshard}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={dp * tp}",
        str(HERE / "parallel_worker.py"),
        str(dp),
        str(tp),
        str(accum),
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = torch.load(out)
    ref_losses, ref_state = reference
    assert result["described"][0 if tp > 1 else 1] != "off"
    assert ("kept gathered" in result["described"][1]) == (reshard == "0")
    torch.testing.assert_close(torch.tensor(result["losses"]), torch.tensor(ref_losses), atol=1e-5, rtol=1e-5)
    for name, value in ref_state.items():
        torch.testing.assert_close(result["state"][name], value, atol=1e-5, rtol=1e-4, msg=name)
