"""The trainer's AdamW: ours in Triton on GPUs where it matches torch's fused AdamW there, else torch's."""

import pytest
import torch
from torch import nn

from training.common.backends import importable
from training.llama import optim


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 4), nn.LayerNorm(4))


def test_cpu_runs_torch_foreach_adamw_with_decay_on_matrices_only():
    optimizer, name = optim.build_optimizer(model(), 1e-3, (0.9, 0.95), 1e-5, 0.1, fused=False)
    assert type(optimizer) is torch.optim.AdamW and name == "foreach"
    decays = sorted((g["weight_decay"], len(g["params"])) for g in optimizer.param_groups)
    assert decays == [(0.0, 3), (0.1, 1)]  # the bias and the norm's two vectors; the weight


def test_a_faulty_triton_adamw_is_named_and_torch_fused_runs(monkeypatch):
    monkeypatch.setattr(optim, "_triton_adamw_fault", lambda device: "the update of a (1000, 37) parameter")
    optimizer, name = optim.build_optimizer(model(), 1e-3, (0.9, 0.95), 1e-5, 0.1, fused=True)
    assert type(optimizer) is torch.optim.AdamW and optimizer.defaults["fused"]
    assert name == "fused (ours in Triton got the update of a (1000, 37) parameter wrong on this GPU)"
    _, name = optim.build_optimizer(model(), 1e-3, (0.9, 0.95), 1e-5, 0.1, fused=True, impl="torch")
    assert name == "fused"


def test_without_triton_torch_fused_runs_unnamed():
    optimizer, name = optim.build_optimizer(model(), 1e-3, (0.9, 0.95), 1e-5, 0.1, fused=True)
    assert name == "fused" and type(optimizer) is torch.optim.AdamW  # CPU parameters: no Triton AdamW


@pytest.mark.skipif(
    not (torch.cuda.is_available() and importable("triton")), reason="Triton AdamW runs on GPUs"
)
def test_triton_adamw_matches_torch_fused_on_the_gpu():
    from training.llama.fused_adamw import TritonAdamW, adamw_fault

    assert adamw_fault(torch.device("cuda")) == ""
    optimizer, name = optim.build_optimizer(model().cuda(), 1e-3, (0.9, 0.95), 1e-5, 0.1, fused=True)
    assert isinstance(optimizer, TritonAdamW) and name.startswith("triton")
