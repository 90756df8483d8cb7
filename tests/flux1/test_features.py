"""Flux.1's features as the build applies them, on the toy shape on the CPU: activation checkpointing
recomputes the same numbers; FP8 (ours, native) swaps exactly the blocks' linear layers and trains within
FP8's tolerance of bf16 from the same weights and draws; AMD's FP8_RECIPE=delayed asks for it."""

from __future__ import annotations

import pytest
import torch

from training.common import dist
from training.common.config import ConfigError
from training.flux1.build import Features, Optim, build_step
from training.flux1.config import FluxConfig
from training.flux1.model import PRESETS
from training.flux1.step import Batch, calibrate_fp8, train_step
from training.fp8 import Fp8Settings
from training.fp8.native import Fp8Linear

SHAPE = PRESETS["tiny"].replace(text_width=64, pooled_width=64)
CPU = dist.DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
OPTIM = Optim(3e-3, (0.9, 0.95), 1e-8, 0.1, 1.0)


def batches(n: int = 4) -> list[Batch]:
    g = torch.Generator().manual_seed(0)
    return [
        Batch(
            torch.randn(8, 16, 64, generator=g),
            torch.randn(8, 64, generator=g),
            2 * torch.randn(8, 16, 8, 8, generator=g),
            torch.full((8, 16, 8, 8), -6.0),
        )
        for _ in range(n)
    ]


def losses(features: Features) -> tuple[list[float], torch.nn.Module]:
    step, _ = build_step(SHAPE, features, OPTIM, CPU, seed=3)
    calibrate_fp8(step, batches(1)[0])
    return [train_step(step, [b], 3e-3)[0].item() for b in batches()], step.model


def test_activation_checkpointing_recomputes_the_same_numbers():
    plain, _ = losses(Features("fp32"))
    recomputed, _ = losses(Features("fp32", activation_checkpointing=True))
    assert recomputed == plain


def test_fp8_swaps_the_blocks_linears_and_trains_as_bf16_does():
    bf16, _ = losses(Features("bf16"))
    fp8, model = losses(Features("fp8", fp8=Fp8Settings(backend="native")))
    swapped = {n for n, m in model.named_modules() if isinstance(m, Fp8Linear)}
    assert swapped and all(
        n.startswith(("transformer_blocks.", "single_transformer_blocks.")) for n in swapped
    )
    assert not isinstance(model.proj_out, Fp8Linear) and not isinstance(model.x_embedder, Fp8Linear)
    # the adaLN modulations read one row per image: too few for the FP8 GEMM, they stay in bf16
    assert not any(".norm" in n for n in swapped)
    assert not isinstance(model.transformer_blocks[0].norm1.linear, Fp8Linear)
    # FP8's tolerance of perf/lib/parity.py: 5 % per step against bf16 from the same weights and draws
    assert fp8 != bf16 and all(abs(a - b) <= 0.05 * abs(b) for a, b in zip(fp8, bf16)), (fp8, bf16)


def test_amds_fp8_recipe_asks_for_fp8():
    env = {"DATADIR": "/d", "BATCHSIZE": "16", "MBS": "16", "LEARNING_RATE": "1e-3"}
    assert FluxConfig.from_env({**env, "FP8_RECIPE": "delayed"}).requested_precision() == "fp8"
    assert FluxConfig.from_env(env).requested_precision() == "auto"
    with pytest.raises(ConfigError, match="FP8_RECIPE='tensorwise': AMD's flux1 recipe is delayed"):
        FluxConfig.from_env({**env, "FP8_RECIPE": "tensorwise"})
    with pytest.raises(ConfigError, match="FP8_RECIPE=delayed .* contradicts PRECISION=fp32"):
        FluxConfig.from_env({**env, "FP8_RECIPE": "delayed", "PRECISION": "fp32"})
