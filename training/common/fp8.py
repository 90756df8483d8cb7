"""FP8 matmuls for the transformer blocks of either benchmark (BERT and Llama), chosen once at start:
Transformer Engine where the image has it, else torchao's float8 training."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from training.common.backends import importable


@dataclass
class Fp8:
    """What FP8 needs from the training loop: a context around forward (Transformer Engine's autocast) and a
    hook after each optimizer step (torchao's scale precompute for FP8 all-gathers)."""

    backend: str = "off"
    description: str = "off"
    forward_context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    after_optimizer_step: Callable[[nn.Module], None] = field(default=lambda model: None)


def choose_fp8_backend(requested: str) -> str:
    if requested == "auto":
        if importable("transformer_engine"):
            return "te"
        if importable("torchao"):
            return "torchao"
        raise ValueError("FP8=1 needs Transformer Engine or torchao; neither is importable")
    module = {"te": "transformer_engine", "torchao": "torchao"}[requested]
    if not importable(module):
        raise ValueError(f"FP8_BACKEND={requested} but {module} is not importable")
    return requested


def _fp8_linear(module: nn.Module, fqn: str) -> bool:
    """FP8 for the projections inside the transformer blocks (`layers.N...`, also under Hugging Face's
    `model.` prefix) only, not the output layer or heads (as NeMo's and NVIDIA's recipes), and only where
    both dimensions are multiples of 16 (the FP8 GEMM's requirement)."""
    in_block = fqn.startswith("layers.") or ".layers." in fqn
    return (
        isinstance(module, nn.Linear)
        and in_block
        and module.in_features % 16 == 0
        and module.out_features % 16 == 0
    )


def apply_fp8(
    model: nn.Module, enabled: bool, backend: str = "auto", recipe: str = "tensorwise", fsdp: bool = False
) -> Fp8:
    """Swap the blocks' linear layers for FP8 ones: Transformer Engine's (delayed scaling, HYBRID format,
    amax history 4, most recent: AMD's and NVIDIA's recipe) or torchao's float8 training (dynamic
    `recipe` scaling; with FSDP2, weights are all-gathered in FP8)."""
    if not enabled:
        return Fp8()
    backend = choose_fp8_backend(backend)
    if backend == "te":
        import transformer_engine.pytorch as te
        from transformer_engine.common.recipe import DelayedScaling, Format

        swapped = 0
        for fqn, module in list(model.named_modules()):
            for name, child in list(module.named_children()):
                full = f"{fqn}.{name}" if fqn else name
                if _fp8_linear(child, full):
                    new = te.Linear(
                        child.in_features,
                        child.out_features,
                        bias=child.bias is not None,
                        params_dtype=child.weight.dtype,
                        device=child.weight.device,
                    )
                    if child.weight.device.type != "meta":
                        with torch.no_grad():
                            new.weight.copy_(child.weight)
                            if child.bias is not None:  # BERT's linears have biases (a checkpoint's too)
                                new.bias.copy_(child.bias)
                    setattr(module, name, new)
                    swapped += 1
        fp8_recipe = DelayedScaling(
            fp8_format=Format.HYBRID, amax_history_len=4, amax_compute_algo="most_recent"
        )
        return Fp8(
            "te",
            f"transformer_engine delayed scaling HYBRID, {swapped} linear layers",
            lambda: te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe),
        )
    from torchao.float8 import (
        Float8LinearConfig,
        convert_to_float8_training,
        precompute_float8_dynamic_scale_for_fsdp,
    )

    if recipe == "tensorwise":
        config = Float8LinearConfig(enable_fsdp_float8_all_gather=fsdp)
    else:
        config = Float8LinearConfig.from_recipe_name(recipe)
    convert_to_float8_training(model, config=config, module_filter_fn=_fp8_linear)
    swapped = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
    precompute = recipe == "tensorwise" and fsdp

    def after_step(m: nn.Module) -> None:
        if precompute:
            precompute_float8_dynamic_scale_for_fsdp(m)

    gather = ", FP8 all-gather" if precompute else ""
    return Fp8(
        "torchao",
        f"torchao float8 {recipe}{gather}, {swapped} linear layers",
        after_optimizer_step=after_step,
    )
