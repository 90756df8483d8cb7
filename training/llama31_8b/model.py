"""The Llama 3.1 8B benchmark's model: the shared Llama module (`training.llama.model`) at the config's shape,
laid out over the ranks with the features the config asks for, materialized and initialized from scratch
(the benchmark trains from random weights) by the Llama family's one build (`training.llama.build`)."""

from __future__ import annotations

import torch
from torch import nn

from training.fp8 import Fp8, Fp8Settings, MlpLayout
from training.llama import parallel
from training.llama.build import build_llama
from training.llama.model import MLP, choose_attention, param_dtype
from training.llama31_8b.config import LlamaPretrainConfig


def fp8_settings(cfg: LlamaPretrainConfig, par: parallel.Parallelism) -> Fp8Settings | None:
    """FP8 for the blocks' linears when the config asks; with FSDP2 and no tensor parallelism the weights are
    all-gathered in FP8 (FP8_PARAM_GATHER) and the native backend runs each MLP as one function."""
    if not cfg.fp8:
        return None
    fsdp_only = par.dp * par.cp > 1 and par.tp == 1
    return Fp8Settings(
        backend=cfg.fp8_backend,
        recipe=cfg.fp8_recipe,
        gather_in_fp8=cfg.fp8_param_gather and fsdp_only,
        fuse_mlp=MlpLayout(MLP, up="up_proj", down="down_proj", gate="gate_proj") if par.tp == 1 else None,
        casts=cfg.fp8_casts,
    )


def build_model(
    cfg: LlamaPretrainConfig, par: parallel.Parallelism, mesh, device: torch.device, precision: str
) -> tuple[nn.Module, Fp8, dict[str, str]]:
    """(model, FP8 hooks, what each feature did), from scratch (`training.llama.build.build_llama`)."""
    features = parallel.Features(
        fp8=fp8_settings(cfg, par),
        activation_checkpointing=cfg.activation_checkpointing,
        compile=cfg.compile,
        param_dtype=param_dtype(precision),
        reduce_dtype=cfg.reduce_dtype(param_dtype(precision)),
        reshard_after_forward=cfg.reshard_after_forward,
    )
    attention = choose_attention(cfg.attention, device)
    model, fp8, applied = build_llama(cfg.model_shape(), attention, device, mesh, features)
    return model, fp8, {"attention": model.layers[0].self_attn.backend, **applied}
