"""Flux.1's build: the transformer with the reference's initial weights (`model.build_model`), then the
features in a fixed order, each a no-op when off and saying what it did: activation checkpointing (every
block recomputed in the backward, as the reference's `activation_checkpoint.mode = "full"`), torch.compile
per block, FSDP2 over the data-parallel ranks (each double and single block, then the root, as the
reference's HSDP within a node); then AdamW with the rules' values on every parameter (torchtitan decays
norms and biases too). The trainer, the tests and the benches build a run through `build_step`.

On GPUs the model is built on the meta device, sharded, then materialized and initialized shard by shard
(every rank draws the same weights: DTensor's random numbers follow the global seed). Compute is bf16:
FSDP2's parameter cast (fp32 master weights and gradient reduction), or autocast in one process; on the CPU,
fp32.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from dataclasses import dataclass

import torch
from torch import nn

from training.common import dist
from training.flux1.model import FluxShape, blocks, build_model, init_weights
from training.flux1.step import Draws, Step
from training.fp8 import Fp8, Fp8Settings, apply_fp8, reset_after_materialize

# the transformer blocks whose linear layers run in FP8 (diffusers' names; not the embedders or the output)
FP8_BLOCKS = ("transformer_blocks.", "single_transformer_blocks.")
FP8_KEEPS = (".norm",)  # the blocks' adaLN modulations (norm1, norm1_context, norm): one row per image


@dataclass(frozen=True)
class Features:
    precision: str  # "bf16" | "fp32" | "fp8" (resolved: auto is bf16 on GPUs; fp8 is bf16 with FP8 GEMMs)
    activation_checkpointing: bool = False
    compile: bool = False
    fp8: Fp8Settings | None = None  # with precision fp8: the backend and its scaling


@dataclass(frozen=True)
class Optim:
    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    clip_norm: float


def apply_fp8_blocks(model: nn.Module, features: Features) -> Fp8:
    """FP8 for the blocks' linear layers (`training.fp8`), where PRECISION is fp8."""
    if features.precision != "fp8":
        return Fp8()
    settings = dataclasses.replace(
        features.fp8 or Fp8Settings(), block_prefixes=FP8_BLOCKS, skip_names=FP8_KEEPS
    )
    return apply_fp8(model, settings)


def resolve_precision(requested: str, device: torch.device) -> str:
    if requested == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return requested


def apply_activation_checkpointing(model: nn.Module, enabled: bool) -> str:
    if not enabled:
        return "off"
    model.enable_gradient_checkpointing()
    return f"full recompute of {len(blocks(model))} blocks"


def apply_compile(model: nn.Module, enabled: bool) -> str:
    if not enabled:
        return "off"
    for block in blocks(model):
        block.compile()
    return f"torch.compile per block ({len(blocks(model))} blocks)"


def apply_fsdp(model: nn.Module, info: dist.DistInfo, param_dtype: torch.dtype) -> str:
    """FSDP2 per block, then the root. FSDP2 warns that the single blocks return views (diffusers splits
    the text from the image tokens); nothing writes into them in place (diffusers 0.42), the case the warning
    is about: it is silenced."""
    if info.world_size == 1:
        return "off (one process)"
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    mesh = init_device_mesh(info.device.type, (info.world_size,))
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    units = blocks(model)
    for i, block in enumerate(units):
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=i < len(units) - 1)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return f"FSDP2 over {info.world_size} ranks ({param_dtype} compute params, fp32 master and reduce)"


def build_step(shape: FluxShape, features: Features, optim: Optim, info: dist.DistInfo, seed: int):
    """(the Step, what each feature did). Seeds torch's global RNG with `seed` for the weights (the same on
    every rank); the step's draws are seeded per rank, training's and validation's apart."""
    on_gpu = info.device.type == "cuda"
    compute = torch.float32 if features.precision == "fp32" else torch.bfloat16
    torch.manual_seed(seed)
    model = build_model(shape, "meta" if on_gpu else info.device)
    fp8 = apply_fp8_blocks(model, features)
    applied = {
        "fp8": fp8.description,
        "activation_checkpointing": apply_activation_checkpointing(model, features.activation_checkpointing),
        "compile": apply_compile(model, features.compile),
        "data_parallel": apply_fsdp(model, info, compute),
    }
    if on_gpu:
        model.to_empty(device=info.device)
        reset_after_materialize(model)
        torch.manual_seed(seed)
        init_weights(model)
        fp8.weights_changed(model)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params,
        lr=optim.lr,
        betas=optim.betas,
        eps=optim.eps,
        weight_decay=optim.weight_decay,
        fused=on_gpu,
        foreach=not on_gpu,
    )
    autocast = None
    if compute == torch.bfloat16 and info.world_size == 1:
        autocast = torch.autocast(info.device.type, torch.bfloat16)
    step = Step(
        model,
        optimizer,
        params,
        compute,
        autocast or contextlib.nullcontext(),
        Draws(seed, info.rank, "train", info.device),
        Draws(seed, info.rank, "eval", info.device),
        optim.clip_norm,
        info.device,
        fp8,
    )
    n = sum(p.numel() for p in params)
    applied["model"] = (
        f"diffusers FluxTransformer2DModel, {n / 1e6:.2f} M parameters ({shape.double_layers} "
        f"double, {shape.single_layers} single blocks, hidden {shape.hidden})"
    )
    applied["optimizer"] = f"AdamW ({'fused' if on_gpu else 'foreach'}), decay on every parameter"
    return step, applied
