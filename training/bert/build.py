"""One way to build a BERT run, for the trainer, the golden test and the benches. A run is one typed, frozen
`RunSpec` (the model's shape and weights, attention, precision and FP8, compilation, LAMB's settings, the
micro-batches a step); one function builds it on this machine:

    model, step, chosen = build_run(spec, info)

`BertConfig.run_spec` translates the config's variables into a RunSpec; a bench derives its variants from one
with `dataclasses.replace`. `model` is the bare model (evaluation reads it), `step` the training step over the
wrapped one (DDP over the ranks, then torch.compile), and `chosen` what was built, as the run logs it.
"""

from __future__ import annotations

from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from training.bert import attention as attention_impls
from training.bert.model import BertForPackedPretraining, BertShape, FeedForward, load_pretrained
from training.bert.optim import Lamb, param_groups
from training.bert.step import Step, loss_scaler
from training.common import backends, dist
from training.common.config import ConfigError
from training.common.disclosure import Disclosure
from training.fp8 import Fp8, Fp8Settings, MlpLayout, apply_fp8


@dataclass(frozen=True)
class LambSettings:
    """The optimizer (`optim.Lamb`); the schedule sets each step's rate from `lr`."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    weight_decay: float = 0.01  # not on biases and LayerNorms (`optim.param_groups`)
    max_grad_norm: float = 1.0


def fp8_settings(
    backend: str = "auto",
    fuse_ffn: bool = True,
    casts: str = "auto",
    amax_history: int = 4,
    amax_algo: str = "most_recent",
    fast_accum: bool = False,
) -> Fp8Settings:
    """FP8 for the encoder layers' linears; with the native backend each layer's FFN runs as one function
    (unless `fuse_ffn` is off: to compare)."""
    layout = MlpLayout(FeedForward, up="up", down="down") if fuse_ffn else None
    return Fp8Settings(
        backend=backend,
        fuse_mlp=layout,
        casts=casts,
        amax_history=amax_history,
        amax_algo=amax_algo,
        fast_accum=fast_accum,
    )


@dataclass(frozen=True)
class RunSpec:
    """What a BERT run is, before any machine is involved. The choices that depend on the machine are asked
    for here and made by `build_run` (`attention`, `precision`, FP8's backend)."""

    shape: BertShape
    optimizer: LambSettings = LambSettings()
    checkpoint: Path | None = None  # the phase-1 checkpoint to start from, else a random init
    attention: str = "auto"  # ATTENTION
    precision: str = "auto"  # PRECISION (FP8=1 folded in): auto | fp32 | bf16 | fp16 | fp8
    residual_dtype: str = "fp32"  # RESIDUAL_DTYPE: fp32 | bf16
    fp8: Fp8Settings = field(default_factory=fp8_settings)  # applied where the precision is fp8
    compile: bool = False  # COMPILE: torch.compile the model and LAMB's update
    compile_mode: str = "default"  # COMPILE_MODE
    gradient_steps: int = 1  # GRADIENT_STEPS: micro-batches a step
    init_loss_scale: float = 1024.0  # INIT_LOSS_SCALE: fp16's dynamic loss scale starts here


def build_run(spec: RunSpec, info: dist.DistInfo) -> tuple[BertForPackedPretraining, Step, dict]:
    """The model of `spec` on this rank's device, its LAMB and its step (DDP over the ranks, torch.compile
    around it, the forward's autocast and loss scale), and what was chosen, in the order the run logs it."""
    precision = backends.choose_precision(spec.precision)
    model, fp8, chosen = build_model(spec, info.device, precision)
    o = spec.optimizer
    optimizer = Lamb(
        param_groups(model, o.weight_decay),
        lr=o.lr,
        betas=o.betas,
        eps=o.eps,
        max_grad_norm=o.max_grad_norm,
        compiled=spec.compile,
    )
    train_model = apply_compile(apply_data_parallel(model, info), spec.compile, spec.compile_mode)
    autocast = autocast_context(precision, info.device, fp8)
    scaler = loss_scaler(precision, spec.init_loss_scale, info.device)
    step = Step(train_model, optimizer, spec.gradient_steps, autocast, info, fp8, scaler)
    chosen |= {
        "optimizer": "lamb_foreach_compiled" if spec.compile else "lamb_foreach",
        "data_parallel": "ddp" if info.world_size > 1 else "none",
        "residual_dtype": spec.residual_dtype,
        "compile": spec.compile_mode if spec.compile else "none",
        "loss_scale": f"dynamic from {spec.init_loss_scale}" if precision == "fp16" else "none",
        "platform": backends.platform_name(),
    }
    return model, step, chosen


def build_model(spec: RunSpec, device: torch.device, precision: str):
    """(model, FP8 hooks, what was chosen): the model of `spec` with its attention, the checkpoint's weights
    (or a random init) on `device`, FP8 swapped in where `precision` (as chosen) is fp8."""
    attention = attention_impls.choose_attention(spec.attention)
    if spec.residual_dtype == "bf16" and precision not in ("bf16", "fp8"):
        raise ConfigError(
            f"RESIDUAL_DTYPE=bf16 needs PRECISION bf16 or fp8; PRECISION={spec.precision} "
            f"resolved to {precision} here"
        )
    model = BertForPackedPretraining(spec.shape, attention)
    model.set_residual_dtype(torch.bfloat16 if spec.residual_dtype == "bf16" else None)
    if spec.checkpoint is not None:
        load_pretrained(model, spec.checkpoint)
    model.to(device)
    fp8 = apply_fp8(model, spec.fp8 if precision == "fp8" else None)
    return model, fp8, {"attention": attention, "precision": precision, "fp8": fp8.description}


def apply_compile(model: torch.nn.Module, enabled: bool, mode: str | None = None) -> torch.nn.Module:
    """torch.compile around the DDP wrapper, so that its optimizer splits the graph at bucket boundaries
    and gradient all-reduces overlap the backward pass."""
    return torch.compile(model, mode=mode) if enabled else model


def apply_data_parallel(model: torch.nn.Module, info: dist.DistInfo) -> torch.nn.Module:
    if info.world_size == 1:
        return model
    ids = [info.device.index] if info.device.type == "cuda" else None
    return DDP(model, device_ids=ids, gradient_as_bucket_view=True)


def disclosure(precision: str, fp8: Fp8, micro_batch_size: int) -> Disclosure:
    """The run's 6.x disclosure as built: FP8 linears where FP8 was applied, attention in the autocast dtype,
    and DDP's all-reduce of the float32 gradients (one process: their precision)."""
    compute = {"fp16": "fp16", "fp32": "fp32"}.get(precision, "bfloat16")
    return Disclosure("fp8" if fp8.backend != "off" else compute, compute, "fp32", micro_batch_size)


def autocast_context(precision: str, device: torch.device, fp8: Fp8):
    """A factory of the context every forward runs in: autocast to the compute dtype (bf16 under FP8 too,
    whose matmuls are the swapped linear layers) and Transformer Engine's FP8 autocast where TE is the FP8
    backend."""
    dtype = {"bf16": torch.bfloat16, "fp8": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if dtype is None:
        return nullcontext

    def context() -> ExitStack:
        stack = ExitStack()
        stack.enter_context(torch.autocast(device.type, dtype=dtype))
        stack.enter_context(fp8.forward_context())
        return stack

    return context
