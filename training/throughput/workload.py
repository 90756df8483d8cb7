"""What the measuring loop needs from a model family (`llm.build`, `flux.build`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class Workload:
    name: str
    unit: str  # what one batch element is: "sequence" | "image"
    tokens_per_item: int  # tokens of one sequence (image tokens + text tokens for FLUX)
    flops_per_item: dict[str, float]  # accounting ("ours", "amd") -> model FLOPs per element (flops.py)
    accountings: dict[str, str]  # accounting -> its formula, in words (printed beside its figure)
    backends: dict[str, str]  # feature -> what was used (printed and recorded)
    # make_step(batch, accumulation) -> a function running one optimizer step over `accumulation`
    # iterations of `batch` elements per GPU, returning the step's loss (on the device)
    make_step: Callable[[int, int], Callable[[], torch.Tensor]]
    blocks: int  # transformer blocks (for the reduced-depth note)
    seq: int | None  # sequence length (None for FLUX)
    params: int
    compute: str  # "bf16" on GPUs, "fp32 (CPU)"
    model: torch.nn.Module  # the model the step runs (`--batch_size auto` measures its forward)


def gradient_sync(data_parallel: str, sharded: bool, reduce_each_iteration: bool) -> str:
    """The data-parallel backend's description with, where FSDP2 shards the model, when it reduce-scatters
    the gradients."""
    if not sharded:
        return data_parallel
    when = "after every iteration" if reduce_each_iteration else "once per optimizer step"
    return f"{data_parallel}; gradients reduce-scattered {when}"
