"""The settings both Llama benchmarks share, declared once: how the shared model computes and lays itself
out (attention kernel, compiled blocks, recomputation, FSDP2's gathers, the AdamW kernel) and FP8 on or off.
`LlamaPretrainConfig` (Llama 3.1 8B) and `LoraConfig` (Llama 2 70B LoRA) add their own data, schedule and
shape; a new Llama-family setting is one field here."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from training.common.config import RunSettings, var
from training.llama.model import ATTENTIONS

ADAMW_IMPLS = ("auto", "torch")


@dataclass(frozen=True, kw_only=True)
class LlamaRunSettings(RunSettings):
    attention: str = var("ATTENTION", "auto", help=" | ".join(ATTENTIONS))
    compile: bool = var("COMPILE", False, help="torch.compile each transformer block")
    activation_checkpointing: bool = var(
        "ACTIVATION_CHECKPOINTING", False, help="recompute blocks in backward"
    )
    reshard_after_forward: bool = var(
        "RESHARD_AFTER_FORWARD", True, help="0: FSDP2 keeps every block gathered from forward to backward"
    )
    reduce_each_micro_batch: bool = var(
        "REDUCE_EACH_MICRO_BATCH",
        False,
        help="1: FSDP2 reduce-scatters the gradients after every micro-batch, not once a step (no unsharded "
        "float32 gradients of the whole model held between micro-batches: 32 GB for the 8B; LoRA's are the "
        "adapters' only)",
    )
    grad_reduce_in_fp32: bool = var(
        "GRAD_REDUCE_IN_FP32",
        True,
        help="0: FSDP2 reduce-scatters the gradients in bf16, as AMD's and NVIDIA's Llama submissions do "
        "(Megatron's grad_reduce_in_fp32=False): half the bytes copied and sent; the sharded float32 "
        "gradients still accumulate in float32",
    )
    fp8_param_gather: bool = var(
        "FP8_PARAM_GATHER", True, help="FSDP2 all-gathers the FP8 linears' weights in FP8 (native, torchao)"
    )
    adamw_impl: str = var(
        "ADAMW_IMPL",
        "auto",
        help="auto (GPUs: ours in Triton where it matches torch's fused AdamW there, else torch's) | torch",
    )

    def reduce_dtype(self, param_dtype: torch.dtype) -> torch.dtype:
        """The dtype FSDP2 reduce-scatters gradients in: float32, or with GRAD_REDUCE_IN_FP32=0 the compute
        parameters' dtype (bf16 on GPUs)."""
        return torch.float32 if self.grad_reduce_in_fp32 else param_dtype

    @property
    def fp8(self) -> bool:
        """FP8 matmuls in the transformer blocks (PRECISION=fp8, or FP8=1)."""
        return self.requested_precision() == "fp8"

    def llama_problems(self) -> list[str]:
        """The shared settings' choices, each naming its variable."""
        return [
            f"{name}={value!r} is not one of {', '.join(choices)}"
            for name, value, choices in (
                ("ATTENTION", self.attention, ATTENTIONS),
                ("ADAMW_IMPL", self.adamw_impl, ADAMW_IMPLS),
            )  # fmt: skip
            if value not in choices
        ]
