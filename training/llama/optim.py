"""AdamW and the learning-rate schedule of the Llama 3.1 8B benchmark."""

from __future__ import annotations

import math

import torch
from torch import nn

from training.common.backends import importable


def cosine_with_warmup(step: int, peak: float, warmup_steps: int, max_steps: int, end: float) -> float:
    """Learning rate for optimizer step `step` (0-based), as NeMo's CosineAnnealing scheduler that AMD's and
    NVIDIA's submissions use: linear warm-up peak x (step + 1) / (warmup + 1) up to step == warmup (which is
    at `peak`), then a half cosine from `peak` down to `end` over max_steps - warmup steps, then `end`."""
    if warmup_steps > 0 and step <= warmup_steps:
        return peak * (step + 1) / (warmup_steps + 1)
    if step > max_steps:
        return end
    progress = (step - warmup_steps) / (max_steps - warmup_steps)
    return end + (peak - end) * 0.5 * (1 + math.cos(math.pi * progress))


def build_optimizer(
    model: nn.Module,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
    fused: bool,
    impl: str = "auto",
) -> tuple[torch.optim.Optimizer, str]:
    """AdamW; weight decay on matrices only (Megatron's default: no decay for norms and biases). Parameters
    are grouped by device mesh too: the multi-tensor kernels cannot mix plain tensors with DTensors (tensor
    parallel blocks next to a replicated embedding) or DTensors of different meshes. `fused` (GPUs): with
    `impl` auto, ours in Triton (`fused_adamw`) where it matches torch's fused AdamW on this GPU, else
    torch's; `impl` torch: torch's. Returns the optimizer and what it is."""
    from torch.distributed.tensor import DTensor

    groups: dict[tuple, dict] = {}
    for p in model.parameters():
        if not p.requires_grad:
            continue
        decay = weight_decay if p.ndim >= 2 else 0.0
        mesh = p.device_mesh if isinstance(p, DTensor) else None
        key = (decay, id(mesh) if mesh is not None else None)
        groups.setdefault(key, {"params": [], "weight_decay": decay})["params"].append(p)
    params, name = list(groups.values()), "fused" if fused else "foreach"
    if fused and impl == "auto" and params:
        fault = _triton_adamw_fault(params[0]["params"][0].device)
        if not fault:
            from training.llama.fused_adamw import TritonAdamW

            optimizer = TritonAdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
            return optimizer, "triton (checked against torch's fused on this GPU)"
        if fault != "no Triton":
            name = f"fused (ours in Triton got {fault} wrong on this GPU)"
    options = {"fused": True} if fused else {"foreach": True}
    return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, **options), name


_FAULTS: dict[torch.device, str] = {}


def _triton_adamw_fault(device: torch.device) -> str:
    """ "" where `fused_adamw.TritonAdamW` may run on `device` (checked once per device), else why not."""
    if device not in _FAULTS:
        if device.type != "cuda" or not importable("triton"):
            _FAULTS[device] = "no Triton"
        else:
            from training.llama.fused_adamw import adamw_fault

            _FAULTS[device] = adamw_fault(device)
    return _FAULTS[device]
