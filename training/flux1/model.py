"""Flux.1-schnell's MMDiT as diffusers builds it (`FluxTransformer2DModel`, the model the throughput suite
trains too), with the MLPerf reference's initialization, and the latent layout the reference feeds it.

The reference (torchtitan's `experiments/flux`, MLCommons' `text_to_image`) has its own copy of Black Forest
Labs' model; diffusers' is the same network (it loads BFL's checkpoints), with the fused projections split:
the double blocks' `qkv` is diffusers' `to_q/to_k/to_v` (and `add_*_proj` for the text stream), the single
blocks' `linear1` is `to_q/to_k/to_v` + `proj_mlp` and their `linear2` is `proj_out`. `init_weights` draws
what torchtitan's `FluxModel.init_weights` draws (DiT's scheme): Xavier-uniform matrices with the bound of
the fused matrix they are part of, zero biases, N(0, 0.02) for the time and pooled-text embedders, zero
adaLN modulations and a zero output layer, unit norm scales.

One difference in the arithmetic: the reference's QK norms are `nn.RMSNorm(head_dim)` with torch's default
epsilon (the input dtype's machine epsilon), diffusers' (and Black Forest Labs') use 1e-6.

Latents are patchified 2x2 into tokens (`pack_latents`: b c (h 2) (w 2) -> b (h w) (c 2 2)), each token's
position (0, row, column); text tokens sit at position 0.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import nn

PATCH = 2  # latent pixels per token side
POSITION_DIM = 3  # (0, row, column), as the reference's create_position_encoding_for_latents
# The VAE's latent statistics the reference normalizes the sampled latent by (its config's
# encoder.autoencoder_shift / autoencoder_scale, FLUX.1's AutoEncoderParams)
AUTOENCODER_SHIFT = 0.1159
AUTOENCODER_SCALE = 0.3611


@dataclass(frozen=True)
class FluxShape:
    """The transformer's shape. The widths of its inputs come from the data: T5's (`text_width`), CLIP's
    pooled embedding (`pooled_width`) and the VAE's latent channels (`latent_channels`)."""

    double_layers: int = 19
    single_layers: int = 38
    num_heads: int = 24
    head_dim: int = 128
    axes_dims_rope: tuple[int, int, int] = (16, 56, 56)
    mlp_ratio: float = 4.0
    text_width: int = 4096
    pooled_width: int = 768
    latent_channels: int = 16

    @property
    def hidden(self) -> int:
        return self.num_heads * self.head_dim

    def replace(self, **overrides) -> FluxShape:
        return dataclasses.replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def problems(self) -> list[str]:
        out = []
        if sum(self.axes_dims_rope) != self.head_dim:
            out.append(
                f"the rotary axes {self.axes_dims_rope} must add up to the head dimension {self.head_dim}"
            )
        if any(d % 2 for d in self.axes_dims_rope):
            out.append(f"the rotary axes {self.axes_dims_rope} must each be even")
        return out


PRESETS = {
    "schnell": FluxShape(),  # MLPerf's flux1: 19 double, 38 single blocks, hidden 3072, 24 heads
    # the CPU default's: the same network, 2 heads of 32, one double and two single blocks
    "tiny": FluxShape(double_layers=1, single_layers=2, num_heads=2, head_dim=32, axes_dims_rope=(8, 12, 12)),
}


def build_model(shape: FluxShape, device: torch.device | str = "cpu") -> nn.Module:
    """The transformer on `device` with the reference's initial weights (drawn from torch's global RNG). On
    CUDA, PyTorch's SDPA may not pick cuDNN's attention: its backward fails on the MMDiT's joint attention
    (an illegal memory access on Hopper), so flash or memory-efficient attention runs."""
    from diffusers import FluxTransformer2DModel

    if torch.cuda.is_available():  # (a process-wide switch: whatever device this copy is built on)
        torch.backends.cuda.enable_cudnn_sdp(False)

    with torch.device(device):
        model = FluxTransformer2DModel(
            patch_size=1,
            in_channels=shape.latent_channels * PATCH * PATCH,
            num_layers=shape.double_layers,
            num_single_layers=shape.single_layers,
            attention_head_dim=shape.head_dim,
            num_attention_heads=shape.num_heads,
            joint_attention_dim=shape.text_width,
            pooled_projection_dim=shape.pooled_width,
            guidance_embeds=False,  # schnell has no guidance embedding
            axes_dims_rope=shape.axes_dims_rope,
        )
    init_weights(model)
    return model


def blocks(model: nn.Module) -> list[nn.Module]:
    """The double then the single blocks: the units FSDP shards and activation checkpointing recomputes."""
    return [*model.transformer_blocks, *model.single_transformer_blocks]


def _xavier(*parts: torch.Tensor) -> None:
    """Xavier-uniform for the matrices `parts`, stacked along their outputs into one fused matrix (the
    reference's `qkv` or `linear1`): every part drawn with the fused matrix's bound."""
    fan_out, fan_in = sum(p.shape[0] for p in parts), parts[0].shape[1]
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    for p in parts:
        nn.init.uniform_(p, -bound, bound)


def _linear(layer: nn.Linear, std: float | None = None) -> None:
    """A linear layer: N(0, std) when `std` is given, else Xavier-uniform on its own; bias 0."""
    if std is None:
        _xavier(layer.weight)
    else:
        nn.init.normal_(layer.weight, std=std)
    nn.init.zeros_(layer.bias)


def _zero(layer: nn.Linear) -> None:
    nn.init.zeros_(layer.weight)
    nn.init.zeros_(layer.bias)


def _attention(attn: nn.Module) -> None:
    """A double block's attention: each stream's q/k/v as one fused matrix, its output projection, its
    QK-norm scales 1."""
    streams = [(attn.to_q, attn.to_k, attn.to_v), (attn.add_q_proj, attn.add_k_proj, attn.add_v_proj)]
    for q, k, v in streams:
        _xavier(q.weight, k.weight, v.weight)
        for layer in (q, k, v):
            nn.init.zeros_(layer.bias)
    _linear(attn.to_out[0])
    _linear(attn.to_add_out)
    _qk_norms(attn)


def _qk_norms(attn: nn.Module) -> None:
    """The RMS norms of queries and keys (of both streams where there are two): scale 1."""
    for norm in ("norm_q", "norm_k", "norm_added_q", "norm_added_k"):
        if getattr(attn, norm, None) is not None:
            nn.init.ones_(getattr(attn, norm).weight)


@torch.no_grad()
def init_weights(model: nn.Module) -> None:
    """torchtitan's FluxModel.init_weights on diffusers' module names (see the module docstring)."""
    _linear(model.x_embedder)
    _linear(model.context_embedder)
    embed = model.time_text_embed
    for mlp in (embed.timestep_embedder, embed.text_embedder):
        _linear(mlp.linear_1, std=0.02)
        _linear(mlp.linear_2, std=0.02)
    for block in model.transformer_blocks:
        _zero(block.norm1.linear)
        _zero(block.norm1_context.linear)
        _attention(block.attn)
        for ff in (block.ff, block.ff_context):
            _linear(ff.net[0].proj)
            _linear(ff.net[2])
    for block in model.single_transformer_blocks:
        attn = block.attn
        _xavier(attn.to_q.weight, attn.to_k.weight, attn.to_v.weight, block.proj_mlp.weight)
        for layer in (attn.to_q, attn.to_k, attn.to_v, block.proj_mlp):
            nn.init.zeros_(layer.bias)
        _qk_norms(attn)
        _linear(block.proj_out)
        _zero(block.norm.linear)
    _zero(model.norm_out.linear)
    _zero(model.proj_out)


def pack_latents(x: torch.Tensor) -> torch.Tensor:
    """[b, c, h, w] latents -> [b, (h/2)(w/2), c*4] tokens, row-major over 2x2 patches."""
    b, c, h, w = x.shape
    x = x.reshape(b, c, h // PATCH, PATCH, w // PATCH, PATCH).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // PATCH) * (w // PATCH), c * PATCH * PATCH)


def unpack_latents(x: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The inverse of `pack_latents` for [height, width] latents."""
    b, _, cpp = x.shape
    c = cpp // (PATCH * PATCH)
    x = x.reshape(b, height // PATCH, width // PATCH, c, PATCH, PATCH).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c, height, width)


def image_ids(height: int, width: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """[(h/2)(w/2), 3]: each image token's (0, row, column)."""
    rows, cols = torch.meshgrid(
        torch.arange(height // PATCH, device=device),
        torch.arange(width // PATCH, device=device),
        indexing="ij",
    )
    return torch.stack([torch.zeros_like(rows), rows, cols], dim=-1).flatten(0, 1).float()


def text_ids(length: int, device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.zeros(length, POSITION_DIM, device=device)
