"""One way to build a Llama run, for both Llama benchmarks, the throughput suite and the benches. What a run
is, is one typed, frozen `RunSpec` (its shape, its features, its step and optimizer settings); one function
builds it on this machine:

    model, step, applied = build_run(spec, device, mesh, layout)

The configs translate their environment variables into a RunSpec (`LlamaPretrainConfig.run_spec`,
`LoraConfig.run_spec`); a bench derives its variants from one with `dataclasses.replace`. `applied`
(`parallel.Applied`) says what the build did and chose on this machine: the attention kernel, the precision,
each feature, the optimizer.

The model is built on the meta device (each rank allocates only its shards), laid out and given its features
(`parallel.apply_features`), then materialized: weights read from a Hugging Face checkpoint, or the
from-scratch init. On the CPU a from-scratch model is initialized in full before it is laid out, so that every
rank holds the same values whatever the world size (the tests compare 1- and 2-process runs).

The from-scratch init draws its numbers in one canonical order, the parameter order of a plain `Llama` of the
shape (`model.canonical_names`), whatever the features did to the modules (the FP8 swap reorders an MLP's
children, LoRA adds adapters) and whether the model is materialized whole or part by part (FP8_WEIGHTS on one
GPU: one block at a time, each stored in FP8 before the next; under FSDP2 the bf16 shards are materialized
whole, then stored as FP8 shards): the same seed gives the same weights in every mode, so a fast mode and its
bf16 reference start from the same model (`perf/lib/parity.py`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from training.common.backends import choose_precision
from training.fp8 import MlpLayout, reset_after_materialize, store_shards_in_fp8, store_weights_in_fp8
from training.llama import optim, parallel
from training.llama.attention import choose_attention
from training.llama.checkpoint import load_hf_checkpoint
from training.llama.fp8_attention import fp8_attention_fault
from training.llama.model import (
    MLP,
    Llama,
    LlamaShape,
    compiled_cross_entropy,
    cross_entropy,
    init_weights,
    param_dtype,
)
from training.llama.step import Step
from training.lora import reset_lora

# The Llama MLP as native FP8 runs it in one function (`training.fp8.MlpLayout`)
FP8_MLP = MlpLayout(MLP, up="up_proj", down="down_proj", gate="gate_proj")


@dataclass(frozen=True)
class AdamWSettings:
    """The optimizer (`optim.build_optimizer`); by default torch.optim.AdamW's own defaults."""

    lr: float = 1e-3  # the step sets each step's rate (`step.train_step`)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01  # on matrices only
    impl: str = "auto"  # ADAMW_IMPL: auto (ours in Triton on GPUs where it checks out) | torch


@dataclass(frozen=True)
class StepSettings:
    """How the step trains, besides its data (`step.Step`)."""

    clip_norm: float = 1.0
    # FSDP2 with several micro-batches: reduce-scatter the gradients after each, not once after the last
    sync_each_micro_batch: bool = False
    # one GPU in bf16 without FP8, one micro-batch a step: AdamW keeps the matrices' weights in bf16 (float32
    # masters inside it) instead of autocast casting them each step (`TritonAdamW.hold_bf16`)
    hold_bf16_weights: bool = False


@dataclass(frozen=True)
class RunSpec:
    """What a Llama run is, before any machine is involved: the model's shape and where its weights come
    from, the features applied to it, how it steps. The choices that depend on the machine are asked for here
    and made by `build_run` (`attention`, `precision`, LoRA's and FP8's kernels)."""

    shape: LlamaShape
    features: parallel.Features = parallel.Features()
    step: StepSettings = StepSettings()
    optimizer: AdamWSettings = AdamWSettings()
    attention: str = "auto"  # ATTENTION: auto | sdpa | cudnn | flash_attn | flash4
    precision: str = "auto"  # PRECISION: auto (bf16 on GPUs, fp32 on the CPU) | fp32 | bf16 | fp8
    checkpoint: Path | None = None  # a Hugging Face folder to read the weights from, else from scratch
    # the frozen linears stored in FP8 (a LoRA base; needs native FP8): on one GPU materialized one block at a
    # time, each stored before the next (the bf16 model never exists whole); under FSDP2 as FP8 shards,
    # all-gathered as stored
    fp8_weights: bool = False
    # FP8_DPA: attention in FP8, cuDNN's FP8 SDPA (`training.llama.fp8_attention`; NVIDIA GPUs with
    # nvidia-cudnn-frontend, no window, no context parallelism)
    fp8_attention: bool = False


def build_run(
    spec: RunSpec, device: torch.device, mesh, layout: parallel.Parallelism
) -> tuple[Llama, Step, parallel.Applied]:
    """The model of `spec` on `device`, laid out over `mesh` (None: one process), its optimizer and its step
    (`layout`: the ranks' split and the micro-batches per step), and what was applied and chosen. The step
    computes in bf16 through autocast where FSDP2 does not gather bf16 parameters (one process), with the
    compiled cross-entropy when the blocks are compiled."""
    model, applied = build_model(spec, device, mesh)
    o = spec.optimizer
    on_gpu = device.type == "cuda"
    optimizer, impl = optim.build_optimizer(
        model, o.lr, o.betas, o.eps, o.weight_decay, fused=on_gpu, impl=o.impl
    )
    bf16_autocast = param_dtype(applied.precision) == torch.bfloat16 and not applied.sharded
    autocast = torch.autocast(device.type, torch.bfloat16) if bf16_autocast else contextlib.nullcontext()
    held = 0
    hold = spec.step.hold_bf16_weights and bf16_autocast and spec.features.fp8 is None
    if hold and layout.grad_accum == 1 and hasattr(optimizer, "hold_bf16"):  # (bf16 gradients add up in bf16)
        held = optimizer.hold_bf16([m.weight for m in model.modules() if isinstance(m, nn.Linear)])
    step = Step(
        model,
        optimizer,
        layout,
        device,
        mesh,
        loss_fn=compiled_cross_entropy if applied.compiled else cross_entropy,
        autocast=autocast,
        fp8=applied.fp8,
        clip_norm=spec.step.clip_norm,
        sync_each_micro_batch=spec.step.sync_each_micro_batch,
    )
    return model, step, dataclasses.replace(applied, optimizer=impl, bf16_weights_held=held)


def build_model(spec: RunSpec, device: torch.device, mesh) -> tuple[Llama, parallel.Applied]:
    """The model of `spec`, laid out, featured and materialized on `device` (its weights from
    `spec.checkpoint`, each rank reading its own rows, else the from-scratch init), and what was applied and
    chosen. A model with LoRA adapters trains those only: its frozen base is kept in the compute dtype (no
    float32 master copy); any other keeps float32 master weights."""
    features = spec.features
    if spec.fp8_weights and features.fp4 is not None:
        raise ValueError(
            "FP8_WEIGHTS=1 stores the base in e4m3, which the 4-bit GEMMs would quantize from: with FP4=True "
            "set FP8_WEIGHTS=0"
        )
    if spec.fp8_weights and mesh is not None:
        if mesh["tp"].size() > 1 or features.fp8 is None:
            raise ValueError(
                "FP8_WEIGHTS=1 stores the frozen base as FP8 shards under FSDP2, with FP8 on "
                "(PRECISION=fp8) and without tensor parallelism"
            )
        # stored shards are all-gathered as they are: in FP8
        features = dataclasses.replace(features, fp8=dataclasses.replace(features.fp8, gather_in_fp8=True))
    shape = spec.shape
    split = mesh is not None and mesh["cp"].size() > 1
    if split and device.type != "cuda":
        raise ValueError(
            "context parallelism needs GPUs: PyTorch's ring attention runs on the CUDA/ROCm kernels only"
        )
    if split and spec.attention not in ("auto", "sdpa"):
        raise ValueError(
            f"ATTENTION={spec.attention} cannot run with context parallelism: PyTorch's ring "
            "attention takes the place of SDPA only (ATTENTION=sdpa or auto)"
        )
    # with context parallelism, SDPA (ring attention inside the step's context); else the fastest that runs
    attention = "sdpa" if split else choose_attention(spec.attention, device, shape.sliding_window)
    if spec.fp8_attention:
        attention = _fp8_attention(spec, device, split)
    precision = choose_precision(spec.precision, device)
    if split and precision == "fp32":  # torch 2.11 on an H200: "aten.add.Tensor got mixed torch.Tensor and
        # DTensor" in the ring attention's float32 (memory-efficient kernel) path
        raise ValueError(
            "PRECISION=fp32 cannot run with context parallelism here: PyTorch's ring attention "
            "computes in bf16 (PRECISION=bf16 or fp8)"
        )
    compute = param_dtype(precision)
    one_by_one = spec.fp8_weights and mesh is None  # (FSDP2's shards are small: materialized whole)
    init_first = device.type != "cuda" and spec.checkpoint is None and not one_by_one
    with torch.device("meta"):  # (no constructor draws random numbers: every path draws the same)
        model = Llama(shape, attention)
    if init_first:
        model.to_empty(device=device)
        model.init_weights()
        after_init = torch.get_rng_state()
    if spec.features.lora is not None:
        model.to(compute)
    applied = parallel.apply_features(model, mesh, features, compute, device)
    if init_first:  # the adapters made by the features drew numbers: `reset_lora` draws from here, as below
        torch.set_rng_state(after_init)
    else:
        parts = _parts(model) if one_by_one else [("", model)]
        for prefix, part in parts:
            part.to_empty(device=device)
            if spec.checkpoint is not None:
                load_hf_checkpoint(
                    part, spec.checkpoint, show_progress=not prefix.startswith("layers."), under=prefix
                )
            else:
                init_weights(part, shape, prefix)
            if one_by_one and prefix.startswith("layers."):
                store_weights_in_fp8(part)
                if device.type == "cuda":  # give the bf16 copies back, or their cached halves pile up
                    torch.cuda.empty_cache()
        if one_by_one:
            applied.fp8.description += ", frozen weights stored in FP8"
    reset_lora(model)
    reset_after_materialize(model)
    for module in model.modules():  # FP8 attention's amax histories: no backward yet
        if getattr(module, "fp8_history", None) is not None:
            module.fp8_history.zero_()
    applied.fp8.weights_changed(model)  # (the scales of FP8 all-gathers)
    if spec.fp8_weights and mesh is not None:
        stored = store_shards_in_fp8(model)
        applied.fp8.description += f", {stored} frozen weights stored as FP8 shards (all-gathered as stored)"
    attention_precision = "fp8" if attention == "cudnn_fp8" else ("fp32" if precision == "fp32" else "bf16")
    return model, dataclasses.replace(
        applied, attention=attention, precision=precision, attention_precision=attention_precision
    )


def _fp8_attention(spec: RunSpec, device: torch.device, split: bool) -> str:
    """The attention backend of FP8_DPA=1, `cudnn_fp8`, or a ValueError saying why it cannot run."""
    if split or spec.shape.sliding_window is not None:
        raise ValueError(
            "FP8_DPA=1 (cuDNN's FP8 attention) runs causal attention without a sliding window "
            "and without context parallelism"
        )
    if fault := fp8_attention_fault(device):
        raise ValueError(f"FP8_DPA=1: cuDNN's FP8 attention cannot run here: {fault}")
    return "cudnn_fp8"


def _parts(model: Llama) -> list[tuple[str, nn.Module]]:
    """The model's top-level parts in the order of its parameters (`model.canonical_names`): the embedding,
    each block, the final norm, the output layer (those a pipeline stage holds)."""
    parts = [("embed_tokens.", model.embed_tokens)]
    parts += [(f"layers.{i}.", block) for i, block in enumerate(model.layers)]
    parts += [("norm.", model.norm), ("lm_head.", model.lm_head)]
    return [(prefix, part) for prefix, part in parts if part is not None]
