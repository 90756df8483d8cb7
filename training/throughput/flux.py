"""FLUX.1 for the throughput suite: Black Forest Labs' rectified-flow transformer as diffusers builds it
(`FluxTransformer2DModel` from the config's arguments, random weights, nothing downloaded), trained on
synthetic latents and text embeddings, BF16 compute with fp32 master weights under FSDP2 (each double and
single block sharded, then the root), AdamW, clip 1.0. The figure is images per second per GPU, as AMD's
FluxBenchmark reports.

The step is FluxBenchmark's without its encoders (their outputs are what is synthesized): a logit-normal
time t per image, x_t = (1 - t) x_0 + t noise, the transformer predicts the velocity noise - x_0 from x_t, the
T5 and CLIP embeddings and (FLUX.1-dev) the guidance 1.0, and the loss is the mean squared error in float32.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from training.common import dist
from training.common.backends import importable
from training.common.config import ConfigError
from training.llama import optim, parallel
from training.throughput import flops
from training.throughput.config import ModelSpec, RunArgs
from training.throughput.workload import Workload, gradient_sync

LR, BETAS, EPS, WEIGHT_DECAY = 1e-4, (0.9, 0.999), 1e-8, 0.01
CLIP_NORM = 1.0
SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
CLIP_WIDTH = 768  # the pooled CLIP embedding is `pooled_projection_dim` wide; T5's is `joint_attention_dim`


@torch.no_grad()
def init_weights(model: nn.Module, std: float = 0.02) -> None:
    """Random weights for a model built on the meta device: matrices N(0, std), norm scales 1, biases 0."""
    for name, p in model.named_parameters():
        if p.ndim >= 2:
            nn.init.normal_(p, 0.0, std)
        elif name.endswith("bias"):
            nn.init.zeros_(p)
        else:
            nn.init.ones_(p)


def blocks(model: nn.Module) -> list[nn.Module]:
    return [*model.transformer_blocks, *model.single_transformer_blocks]


def shard(model: nn.Module, mesh, param_dtype: torch.dtype) -> str:
    """FSDP2 per block, then the root (embedders, norm_out, proj_out), as `parallel.apply_fsdp` for Llama.
    FSDP2 warns that the single blocks return views (diffusers splits text from image tokens); nothing
    writes into them in place (diffusers 0.42), which is the case the warning is about: it is silenced."""
    if mesh is None:
        return "off"
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for i, block in enumerate(blocks(model)):
        fully_shard(
            block, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=i < len(blocks(model)) - 1
        )
    fully_shard(model, mesh=mesh["dp"], mp_policy=policy)
    name = "bf16" if param_dtype == torch.bfloat16 else "fp32"
    return f"FSDP2 over {mesh['dp'].size()} ranks ({name} compute params, fp32 master and reduce)"


def build(spec: ModelSpec, args: RunArgs, device: torch.device, mesh, world: int) -> Workload:
    if not importable("diffusers"):
        raise ConfigError(
            "FLUX needs diffusers (pip install diffusers): its FluxTransformer2DModel is the model"
        )
    from diffusers import FluxTransformer2DModel

    cfg, on_gpu = spec.flux, device.type == "cuda"
    with torch.device("meta" if on_gpu else device):
        model = FluxTransformer2DModel(**cfg.transformer)
    if not on_gpu:
        init_weights(model)
    applied = {"activation_checkpointing": "off", "compile": "off"}
    if args.activation_checkpointing:
        model.enable_gradient_checkpointing()
        applied["activation_checkpointing"] = f"full recompute of {len(blocks(model))} blocks"
    if args.enable_compile:
        for block in blocks(model):
            block.compile()
        applied["compile"] = f"torch.compile per block ({len(blocks(model))} blocks)"
    param_dtype = torch.bfloat16 if on_gpu else torch.float32
    sharding = shard(model, mesh, param_dtype)
    applied["data_parallel"] = gradient_sync(sharding, mesh is not None, args.reduce_each_iteration)
    if on_gpu:
        model.to_empty(device=device)
        init_weights(model)
    model.train()
    optimizer, impl = optim.build_optimizer(model, LR, BETAS, EPS, WEIGHT_DECAY, fused=on_gpu)
    params = [p for group in optimizer.param_groups for p in group["params"]]

    def precision() -> contextlib.ExitStack:
        """bf16 through autocast in one process (FSDP2 casts otherwise); on GPUs, flash or efficient
        attention: cuDNN's attention backward fails on FLUX's shapes (H100, torch 2.11)."""
        stack = contextlib.ExitStack()
        if on_gpu and mesh is None:
            stack.enter_context(torch.autocast("cuda", torch.bfloat16))
        if on_gpu:
            stack.enter_context(sdpa_kernel(SDPA_BACKENDS))
        return stack

    t = cfg.transformer
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    generator = torch.Generator(device=device).manual_seed(args.seed + rank)
    side = cfg.resolution // (2 * cfg.vae_scale_factor)  # packed latent tokens per image side
    rows, cols = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    img_ids = torch.stack([torch.zeros_like(rows), rows, cols], dim=-1).flatten(0, 1).float().to(device)
    txt_ids = torch.zeros(cfg.text_length, 3, device=device)

    def make_step(batch: int, accum: int):
        def synthetic():  # latents, T5 embeddings, pooled CLIP embedding
            shapes = [
                (batch, cfg.image_tokens, cfg.latent_channels),
                (batch, cfg.text_length, t.get("joint_attention_dim", 4096)),
                (batch, t.get("pooled_projection_dim", CLIP_WIDTH)),
            ]
            return [torch.randn(s, device=device, generator=generator) for s in shapes]

        pool = [synthetic() for _ in range(2)]
        guidance = torch.ones(batch, device=device) if t.get("guidance_embeds") else None

        def run() -> torch.Tensor:
            total = torch.zeros((), device=device)
            for i in range(accum):
                latents, text, pooled = pool[i % 2]
                if hasattr(model, "set_requires_gradient_sync"):  # FSDP2 (`--reduce_each_iteration`)
                    model.set_requires_gradient_sync(args.reduce_each_iteration or i == accum - 1)
                noise = torch.randn(latents.shape, device=device, generator=generator)
                time = torch.sigmoid(torch.randn(batch, device=device, generator=generator))  # logit-normal
                noised = (1 - time[:, None, None]) * latents + time[:, None, None] * noise
                with precision():
                    velocity = model(
                        hidden_states=noised,
                        encoder_hidden_states=text,
                        pooled_projections=pooled,
                        timestep=time,
                        img_ids=img_ids,
                        txt_ids=txt_ids,
                        guidance=guidance,
                        return_dict=False,
                    )[0]
                loss = F.mse_loss(velocity.float(), (noise - latents).float())
                (loss / accum).backward()
                total += loss.detach() / accum
            parallel.clip_grad_norm_(params, CLIP_NORM, optimizer=optimizer)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return dist.all_reduce_sum(total) / world

        return run

    n = sum(p.numel() for p in model.parameters())
    backends = {
        "precision": ("bf16" if on_gpu else "fp32 (CPU)") + " compute, fp32 master weights",
        "model": f"diffusers FluxTransformer2DModel, {n / 1e9:.2f} B parameters, {cfg.resolution} px images "
        f"({cfg.image_tokens} latent tokens) and {cfg.text_length} text tokens",
        "attention": "SDPA: flash or memory-efficient (not cuDNN)" if on_gpu else "SDPA",
        **applied,
        "optimizer": f"AdamW ({impl}), clip {CLIP_NORM}",
    }
    return Workload(
        name=spec.name,
        unit="image",
        tokens_per_item=cfg.image_tokens + cfg.text_length,
        flops_per_item={"ours": flops.flux(t, cfg.image_tokens, cfg.text_length)},
        accountings=flops.FLUX_ACCOUNTINGS,
        backends=backends,
        make_step=make_step,
        blocks=len(blocks(model)),
        seq=None,
        params=n,
        compute="bf16" if on_gpu else "fp32 (CPU)",
        model=model,
    )
