"""The benches' variants as runs: each bench starts from its benchmark's own run (the config's `run_spec`, at
the bench's shape, from random weights, no data read) and derives each variant from it with
`dataclasses.replace`, so a variant is what the trainer would build with those settings (`build_run`), never
a patched module.

A variant's name is `<kind>-<precision>[-modifier...]`; each bench's `--help` lists its modifiers.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from training.fp8 import Fp8Settings
from training.llama.build import FP8_MLP, RunSpec
from training.llama.model import LlamaShape
from training.llama2_70b_lora.config import LoraConfig
from training.llama31_8b.config import LlamaPretrainConfig

# a bench reads no data and no checkpoint: its configs' DATADIR is never opened
NO_DATA = Path("/nonexistent")


def llama_run(shape: LlamaShape, lr: float) -> RunSpec:
    """Llama 3.1 8B's pretraining run at `shape`, as its config builds it by default (AdamW with the rules'
    betas, epsilon and decay, clip 1.0, ATTENTION and PRECISION auto, blocks eager, no FP8)."""
    cfg = LlamaPretrainConfig(datadir=NO_DATA, gbs=1, micro_batch_size=1, max_lr=lr, warmup_steps=0)
    return replace(cfg.run_spec(), shape=shape)


def lora_run(shape: LlamaShape, lr: float = 4e-4, dropout: float = 0.1) -> RunSpec:
    """Llama 2 70B LoRA's fine-tuning run at `shape` on a random base, as its config builds it by default
    (rank 16, alpha 32, the adapters' dropout and A by LORA_KERNEL auto, clip 0.3, AdamW over the
    adapters)."""
    cfg = LoraConfig(datadir=NO_DATA, init_checkpoint="none", minibs=1, lr=lr, lora_dropout=dropout)
    return replace(cfg.run_spec(), shape=shape)


def features(spec: RunSpec, **changes) -> RunSpec:
    """`spec` with some of its features changed (`parallel.Features`)."""
    return replace(spec, features=replace(spec.features, **changes))


def fp8(spec: RunSpec, backend: str, **changes) -> RunSpec:
    """`spec` with FP8 for its blocks' linears, set as the trainers set it (each MLP one function with the
    native backend, the weights all-gathered in FP8 where FSDP2 shards them), `changes` to `Fp8Settings`
    applied."""
    settings = Fp8Settings(backend=backend, gather_in_fp8=True, fuse_mlp=FP8_MLP)
    return features(spec, fp8=replace(settings, **changes))


LLAMA_MODIFIERS = {
    "compile": "blocks compiled (COMPILE=1), whatever --no-compile says",
    "eager": "blocks not compiled",
    "keep": "FSDP2 keeps the blocks gathered from forward to backward (RESHARD_AFTER_FORWARD=0)",
    "unfused": "fp8native's MLP as three FP8 linears, not one function",
    "bf16gather": "FP8 weights all-gathered in bf16 and cast after (FP8_PARAM_GATHER=0)",
    "torchadamw": "torch's fused AdamW (ADAMW_IMPL=torch)",
    "synceach": "with --accum, gradients reduce-scattered after each micro-batch (REDUCE_EACH_MICRO_BATCH=1)",
    "flash4": "FlashAttention-4 (ATTENTION=flash4), else PyTorch's SDPA",
    "bf16reduce": "gradients reduce-scattered in bf16 (GRAD_REDUCE_IN_FP32=0)",
    "fp8act": "with fp8native, the kept blocks' SwiGLU inputs saved in FP8 (FP8_MLP_ACTIVATIONS=1)",
    "fastaccum": "with fp8native, the forward GEMMs with fast accumulation (FP8_FAST_ACCUM=1)",
}


def llama_variant(
    base: RunSpec, precision: str, modes: list[str], compiled: bool, recompute: bool
) -> RunSpec:
    """`bench_llama`'s variant of ours: `precision` bf16, fp8 (torchao's float8) or fp8native (ours), its
    modifiers (`LLAMA_MODIFIERS`), `compiled` blocks, every block recomputed with `recompute`."""
    unknown = set(modes) - set(LLAMA_MODIFIERS)
    if unknown:
        raise ValueError(f"unknown modifier(s) {', '.join(sorted(unknown))}")
    spec = replace(
        base,
        attention="flash4" if "flash4" in modes else "sdpa",
        optimizer=replace(base.optimizer, impl="torch" if "torchadamw" in modes else "auto"),
        step=replace(base.step, sync_each_micro_batch="synceach" in modes),
    )
    spec = features(spec, activation_checkpointing=recompute, compile=compiled,
                    reshard_after_forward="keep" not in modes,
                    grad_reduce_in_fp32="bf16reduce" not in modes)  # fmt: skip
    if precision in ("fp8", "fp8native"):
        spec = fp8(spec, "native" if precision == "fp8native" else "torchao",
                   gather_in_fp8="bf16gather" not in modes,
                   fuse_mlp=None if "unfused" in modes else FP8_MLP,
                   mlp_activations_in_fp8="fp8act" in modes, fast_accum="fastaccum" in modes)  # fmt: skip
    return spec


LORA_MODIFIERS = {
    "ac": "every block recomputed in the backward (ACTIVATION_CHECKPOINTING=1); `acN`: the first N (ACL=N)",
    "eager": "blocks not compiled",
    "fp8w": "with fp8native, the frozen base stored in FP8 (FP8_WEIGHTS=1; under FSDP2 as FP8 shards)",
    "fp8act": "with fp8native, the kept blocks' SwiGLU inputs saved in FP8 (FP8_MLP_ACTIVATIONS=1)",
    "fastaccum": "with fp8native, the forward GEMMs with fast accumulation (FP8_FAST_ACCUM=1)",
    "pytorchcasts": "FP8_CASTS=pytorch (no Triton)",
    "ckptinside": "FP8 blocks compiled together with their checkpoint, as bf16 blocks are",
    "keepattn": "with ac, the recompute skips the attention kernel (AC_KEEP_ATTENTION=1)",
    "flash4": "FlashAttention-4 (ATTENTION=flash4)",
    "sdpa": "PyTorch's SDPA (ATTENTION=sdpa)",
    "torchdropout": "LoRA's dropout and A in PyTorch, not our Triton kernel (LORA_KERNEL=pytorch)",
    "fp8dpa": "with fp8native, attention in FP8: cuDNN's FP8 SDPA (FP8_DPA=1)",
}


def recompute_modes(modes: list[str]) -> tuple[list[str], bool, int | None]:
    """A LoRA variant's recompute modes among `modes`, `ac` (every block recomputed) or `acN` (the first N,
    ACL=N; it wins over `ac`), and what they ask: (the modes, recompute on, how many blocks or None: all)."""
    found = [m for m in modes if m.startswith("ac") and (m == "ac" or m[2:].isdigit())]
    numbered = [int(m[2:]) for m in found if m != "ac"]
    return found, bool(found), numbered[0] if numbered else None


def lora_variant(base: RunSpec, precision: str, modes: list[str], on_gpu: bool) -> RunSpec:
    """`bench_lora`'s variant of ours: `precision` bf16, fp8native (ours) or fp8torchao (torchao's float8),
    its modifiers (`LORA_MODIFIERS`); blocks compiled on GPUs unless `eager`."""
    recompute, recomputed, layers = recompute_modes(modes)
    unknown = set(modes) - set(LORA_MODIFIERS) - set(recompute)
    if unknown:
        raise ValueError(f"unknown modifier(s) {', '.join(sorted(unknown))}")
    spec = features(
        base,
        compile=on_gpu and "eager" not in modes,
        activation_checkpointing=recomputed,
        checkpoint_layers=layers,
        keep_attention="keepattn" in modes,
        fp8_eager_checkpoint="ckptinside" not in modes,
        lora=replace(base.features.lora, kernel="pytorch" if "torchdropout" in modes else "auto"),
    )
    if precision != "bf16":
        spec = fp8(spec, "torchao" if precision == "fp8torchao" else "native",
                   casts="pytorch" if "pytorchcasts" in modes else "auto",
                   mlp_activations_in_fp8="fp8act" in modes, fast_accum="fastaccum" in modes)  # fmt: skip
    attention = next((a for a in ("flash4", "sdpa") if a in modes), "auto")
    return replace(spec, attention=attention, fp8_weights="fp8w" in modes, fp8_attention="fp8dpa" in modes)


def curve_lora_variant(base: RunSpec, modes: list[str], on_gpu: bool) -> RunSpec:
    """`curve_parity lora`'s variant of ours (modes: eager, compile, fp8native, fp8w, fp8act, fastaccum,
    fp8dpa, ac, acN): bf16 autocast, `eager` with PyTorch's kernels (SDPA, dropout, AdamW), else the trainer's
    defaults; compiled on GPUs only with `compile`; `acN` recomputes the first N blocks only (the others keep
    what `fp8act` stores in FP8), whatever `--ac` asks of the others."""
    eager = "eager" in modes
    _, recomputed, layers = recompute_modes(modes)
    spec = replace(base, precision="bf16", attention="sdpa" if eager else "auto", fp8_weights="fp8w" in modes,
                   optimizer=replace(base.optimizer, impl="torch" if eager else "auto"))  # fmt: skip
    spec = features(spec, compile=on_gpu and "compile" in modes, activation_checkpointing=recomputed,
                    checkpoint_layers=layers,
                    lora=replace(base.features.lora, kernel="pytorch" if eager else "auto"))  # fmt: skip
    if "fp8native" not in modes:
        return spec
    spec = replace(spec, fp8_attention="fp8dpa" in modes)
    return fp8(spec, "native", mlp_activations_in_fp8="fp8act" in modes, fast_accum="fastaccum" in modes)


def curve_llama_variant(base: RunSpec, name: str, on_gpu: bool) -> RunSpec:
    """`curve_parity llama`'s variant of ours: `ours-bf16-eager` (PyTorch's kernels and AdamW, blocks eager;
    every variant on the CPU), `ours-bf16` (compiled, the trainer's kernels), `ours-fp8native`,
    `ours-fp8-torchao`; bf16 autocast."""
    eager = name.endswith("eager") or not on_gpu
    spec = replace(base, precision="bf16", attention="sdpa" if eager else "auto",
                   optimizer=replace(base.optimizer, impl="torch" if eager else "auto"))  # fmt: skip
    spec = features(spec, compile=not eager)
    if "fp8" in name:
        spec = fp8(spec, "torchao" if name.endswith("torchao") else "native")
    return spec
