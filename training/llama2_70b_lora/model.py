"""The LoRA benchmark's model: the shared Llama module at the checkpoint's shape (Llama 2 70B), laid out over
the ranks with the config's features and the LoRA adapters (`training.llama.parallel.apply_features`), then
materialized: the frozen base read from the Hugging Face safetensors shards, each rank its own rows
(`training.llama.checkpoint`), the adapters initialized (A Kaiming-uniform, B zero)."""

from __future__ import annotations

import torch
from torch import nn

from training.common.config import ConfigError
from training.fp8 import Fp8, Fp8Settings, MlpLayout
from training.llama import parallel
from training.llama.build import build_llama
from training.llama.checkpoint import shape_from_hf_config
from training.llama.model import MLP, PRESETS, LlamaShape, choose_attention, param_dtype
from training.llama2_70b_lora.config import LoraConfig
from training.lora import LoraSettings
from training.lora.fused import choose_kernel


def model_shape(cfg: LoraConfig) -> LlamaShape:
    """The checkpoint's shape (its config.json), or Llama 2 70B's without one (INIT_CHECKPOINT=none), at the
    run's sequence length; NUM_LAYERS keeps the first blocks only."""
    folder = cfg.paths()["model"]
    base = shape_from_hf_config(folder) if (folder / "config.json").exists() else PRESETS["70b"]
    return base.replace(num_layers=cfg.num_layers, max_seq_length=cfg.seq_length)


def is_llama2_70b(shape: LlamaShape) -> bool:
    return shape.replace(max_seq_length=8192) == PRESETS["70b"]


def fp8_settings(cfg: LoraConfig, par: parallel.Parallelism) -> Fp8Settings | None:
    """FP8 for the blocks' (frozen) linears; with FSDP2 their weights are all-gathered in FP8, and the native
    backend runs each MLP as one function."""
    if not cfg.fp8:
        return None
    layout = MlpLayout(MLP, up="up_proj", down="down_proj", gate="gate_proj")
    gather = cfg.fp8_param_gather and par.dp > 1
    return Fp8Settings(backend=cfg.fp8_backend, gather_in_fp8=gather, fuse_mlp=layout, casts=cfg.fp8_casts)


def build_model(
    cfg: LoraConfig, par: parallel.Parallelism, mesh, device: torch.device, precision: str
) -> tuple[nn.Module, Fp8, dict[str, str]]:
    """(model, FP8 hooks, what each feature did). The frozen base in the compute dtype (bf16 on GPUs: nothing
    updates it, so no float32 master copy), the adapters in float32 (`training.llama.build.build_llama`)."""
    shape = model_shape(cfg)
    kernel, kernel_chosen = choose_kernel(cfg.lora_kernel, device)
    base_dtype = param_dtype(precision)
    features = parallel.Features(
        fp8=fp8_settings(cfg, par),
        lora=LoraSettings(cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, kernel),
        activation_checkpointing=cfg.activation_checkpointing,
        checkpoint_layers=cfg.checkpoint_layers,
        keep_attention=cfg.keep_attention,
        compile=cfg.compile,
        param_dtype=base_dtype,
        reduce_dtype=cfg.reduce_dtype(base_dtype),
        reshard_after_forward=cfg.reshard_after_forward,
    )
    folder = cfg.paths()["model"] if cfg.init_checkpoint == "model" else None
    try:
        model, fp8, applied = build_llama(
            shape, choose_attention(cfg.attention, device), device, mesh, features,
            checkpoint=folder, fp8_weights=cfg.fp8_weights, base_dtype=base_dtype,
        )  # fmt: skip
    except ValueError as err:  # FP8_WEIGHTS with several ranks
        raise ConfigError(str(err)) from None
    applied["lora"] += f"; dropout and A: {kernel_chosen}"
    weights = (
        f"{folder} (Hugging Face safetensors, read shard by shard)"
        if folder
        else "random (INIT_CHECKPOINT=none)"
    )
    return model, fp8, {"attention": model.layers[0].self_attn.backend, "weights": weights, **applied}
