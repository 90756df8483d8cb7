"""The LoRA benchmark's model: the shared Llama module at the checkpoint's shape (Llama 2 70B), laid out over
the ranks with the config's features and the LoRA adapters (`training.llama.parallel.apply_features`), then
materialized: the frozen base read from the Hugging Face safetensors shards, each rank its own rows
(`training.llama.checkpoint`), the adapters initialized (A Kaiming-uniform, B zero)."""

from __future__ import annotations

import torch
from torch import nn

from training.common.config import ConfigError
from training.fp8 import Fp8, Fp8Settings, MlpLayout, reset_after_materialize, store_weights_in_fp8
from training.llama import parallel
from training.llama.checkpoint import load_hf_checkpoint, shape_from_hf_config
from training.llama.model import MLP, PRESETS, Llama, LlamaShape, choose_attention, init_weights
from training.llama2_70b_lora.config import LoraConfig
from training.lora import LoraSettings, reset_lora
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
    """(model, FP8 hooks, what each feature did). Built on the meta device, the frozen base in the compute
    dtype (bf16 on GPUs: nothing updates it, so no float32 master copy), the adapters in float32."""
    shape = model_shape(cfg)
    kernel, kernel_chosen = choose_kernel(cfg.lora_kernel, device)
    base_dtype = torch.bfloat16 if precision in ("bf16", "fp8") else torch.float32
    with torch.device("meta"):
        model = Llama(shape, choose_attention(cfg.attention, device)).to(base_dtype)
    features = parallel.Features(
        fp8=fp8_settings(cfg, par),
        lora=LoraSettings(cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, kernel),
        activation_checkpointing=cfg.activation_checkpointing,
        checkpoint_layers=cfg.checkpoint_layers,
        keep_attention=cfg.keep_attention,
        compile=cfg.compile,
        param_dtype=base_dtype,
        reshard_after_forward=cfg.reshard_after_forward,
    )
    fp8, applied = parallel.apply_features(model, mesh, features)
    applied["lora"] += f"; dropout and A: {kernel_chosen}"
    folder = cfg.paths()["model"] if cfg.init_checkpoint == "model" else None
    if cfg.fp8_weights:  # one block at a time, each stored in FP8 before the next: never the bf16 model
        if mesh is not None:
            raise ConfigError("FP8_WEIGHTS=1 runs on one GPU only (FSDP2 shards bf16 weights instead)")
        for i, block in enumerate(model.layers):
            _materialize(block, device, folder, shape, f"layers.{i}.")
            store_weights_in_fp8(block)
            if device.type == "cuda":  # give the bf16 copies back, or their cached halves pile up
                torch.cuda.empty_cache()
        for name in ("embed_tokens", "norm", "lm_head"):
            _materialize(getattr(model, name), device, folder, shape, f"{name}.")
        applied["fp8"] += ", frozen weights stored in FP8"
    else:
        _materialize(model, device, folder, shape, "")
    weights = (
        f"{folder} (Hugging Face safetensors, read shard by shard)"
        if folder
        else "random (INIT_CHECKPOINT=none)"
    )
    reset_lora(model)
    reset_after_materialize(model)
    fp8.weights_changed(model)  # (the scales of FP8 all-gathers: the frozen weights never change after)
    return model, fp8, {"attention": model.layers[0].self_attn.backend, "weights": weights, **applied}


def _materialize(module: nn.Module, device, folder, shape: LlamaShape, under: str) -> None:
    """Allocate `module` on `device` and set its frozen weights: from the checkpoint in `folder`, or (None)
    the from-scratch init. (The adapters are set by `reset_lora`.)"""
    module.to_empty(device=device)
    if folder is not None:
        load_hf_checkpoint(module, folder, show_progress=not under.startswith("layers."), under=under)
    else:
        init_weights(module, shape)
