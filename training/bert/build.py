"""BERT's build: the model of BERT_CONFIG with its attention, the checkpoint's weights (or a random init) on
the device and FP8 swapped in (`build_model`), then the wrapping the trainer and the benches apply in order:
DDP over the ranks (`apply_data_parallel`), torch.compile around it (`apply_compile`), and the context each
forward runs in (`autocast_context`). The trainer (`train.py`), the benches (`perf/bench_bert.py`,
`perf/curve_parity.py`) and the tests build BERT through these.
"""

from __future__ import annotations

from contextlib import ExitStack, nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from training.bert import attention as attention_impls
from training.bert.config import BertConfig
from training.bert.model import BertForPackedPretraining, BertShape, FeedForward, load_pretrained
from training.common import dist
from training.common.config import ConfigError
from training.common.disclosure import Disclosure
from training.fp8 import Fp8, Fp8Settings, MlpLayout, apply_fp8


def build_model(cfg: BertConfig, paths: dict, device: torch.device, precision: str):
    """(model, FP8 hooks, what was chosen): the model of BERT_CONFIG with its attention, the checkpoint's
    weights (or a random init) on `device`, FP8 swapped in for PRECISION=fp8."""
    shape = BertShape.from_json(paths["bert_config"])
    attention = attention_impls.choose_attention(cfg.attention)
    if cfg.residual_dtype == "bf16" and precision not in ("bf16", "fp8"):
        raise ConfigError(f"RESIDUAL_DTYPE=bf16 needs PRECISION bf16 or fp8; PRECISION={cfg.precision} "
                          f"resolved to {precision} here")  # fmt: skip
    model = BertForPackedPretraining(shape, attention)
    model.set_residual_dtype(torch.bfloat16 if cfg.residual_dtype == "bf16" else None)
    if paths["init_checkpoint"] is not None:
        load_pretrained(model, paths["init_checkpoint"])
    model.to(device)
    settings = fp8_settings(cfg.fp8_backend, casts=cfg.fp8_casts, amax_history=cfg.fp8_amax_history,
                            amax_algo=cfg.fp8_amax_algo, fast_accum=cfg.fp8_fast_accum)  # fmt: skip
    fp8 = apply_fp8(model, settings if precision == "fp8" else None)
    return model, fp8, {"attention": attention, "precision": precision, "fp8": fp8.description}


def fp8_settings(backend: str, fuse_ffn: bool = True, casts: str = "auto", amax_history: int = 4,
                 amax_algo: str = "most_recent", fast_accum: bool = False) -> Fp8Settings:  # fmt: skip
    """FP8 for the encoder layers' linears; with the native backend each layer's FFN runs as one function
    (unless `fuse_ffn` is off: to compare)."""
    layout = MlpLayout(FeedForward, up="up", down="down") if fuse_ffn else None
    return Fp8Settings(backend=backend, fuse_mlp=layout, casts=casts, amax_history=amax_history,
                       amax_algo=amax_algo, fast_accum=fast_accum)  # fmt: skip


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
