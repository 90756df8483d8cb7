"""One way to build a Llama model, for both Llama benchmarks, the throughput suite and the benches:

    model, fp8, applied = build_llama(shape, attention, device, mesh, features, checkpoint=folder)

Built on the meta device (each rank allocates only its shards), laid out and given its features
(`parallel.apply_features`), then materialized: weights read from a Hugging Face checkpoint, or the
from-scratch init. On the CPU a from-scratch model is initialized in full before it is laid out, so that every
rank holds the same values whatever the world size (the tests compare 1- and 2-process runs).

The from-scratch init draws its numbers in one canonical order, the parameter order of a plain `Llama` of the
shape (`model.canonical_names`), whatever the features did to the modules (the FP8 swap reorders an MLP's
children, LoRA adds adapters) and whether the model is materialized whole or part by part (FP8_WEIGHTS: one
block at a time, each stored in FP8 before the next): the same seed gives the same weights in every mode, so a
fast mode and its bf16 reference start from the same model (`perf/parity.py`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from training.fp8 import Fp8, reset_after_materialize, store_weights_in_fp8
from training.llama import parallel
from training.llama.checkpoint import load_hf_checkpoint
from training.llama.model import Llama, LlamaShape, init_weights
from training.lora import reset_lora


def build_llama(
    shape: LlamaShape,
    attention: str,
    device: torch.device,
    mesh,
    features: parallel.Features,
    *,
    checkpoint: Path | None = None,
    fp8_weights: bool = False,
    base_dtype: torch.dtype | None = None,
) -> tuple[Llama, Fp8, dict[str, str]]:
    """(model, FP8 hooks, what each feature did). `checkpoint`: a Hugging Face folder whose safetensors shards
    give the weights (each rank reads its own rows), else the from-scratch init. `fp8_weights`: materialize
    one block at a time and store its frozen linears' weights in FP8 before the next (a LoRA base on one
    GPU: the bf16 model never exists whole). `base_dtype`: the parameters' dtype (LoRA's frozen bf16 base),
    else float32 master weights."""
    if fp8_weights and mesh is not None:
        raise ValueError("FP8_WEIGHTS=1 runs on one GPU only (FSDP2 shards bf16 weights instead)")
    init_first = device.type != "cuda" and checkpoint is None and not fp8_weights
    with torch.device("meta"):  # (no constructor draws random numbers: every path draws the same)
        model = Llama(shape, attention)
    if init_first:
        model.to_empty(device=device)
        model.init_weights()
        after_init = torch.get_rng_state()
    if base_dtype is not None:
        model.to(base_dtype)
    fp8, applied = parallel.apply_features(model, mesh, features)
    if init_first:  # the adapters made by the features drew numbers: `reset_lora` draws from here, as below
        torch.set_rng_state(after_init)
    else:
        parts = _parts(model) if fp8_weights else [("", model)]
        for prefix, part in parts:
            part.to_empty(device=device)
            if checkpoint is not None:
                load_hf_checkpoint(part, checkpoint, show_progress=not prefix.startswith("layers."),
                                   under=prefix)  # fmt: skip
            else:
                init_weights(part, shape, prefix)
            if fp8_weights and prefix.startswith("layers."):
                store_weights_in_fp8(part)
                if device.type == "cuda":  # give the bf16 copies back, or their cached halves pile up
                    torch.cuda.empty_cache()
        if fp8_weights:
            applied["fp8"] += ", frozen weights stored in FP8"
    reset_lora(model)
    reset_after_materialize(model)
    fp8.weights_changed(model)  # (the scales of FP8 all-gathers)
    return model, fp8, applied


def _parts(model: Llama) -> list[tuple[str, nn.Module]]:
    """The model's top-level parts in the order of its parameters (`model.canonical_names`): the embedding,
    each block, the final norm, the output layer (those a pipeline stage holds)."""
    parts = [("embed_tokens.", model.embed_tokens)]
    parts += [(f"layers.{i}.", block) for i, block in enumerate(model.layers)]
    parts += [("norm.", model.norm), ("lm_head.", model.lm_head)]
    return [(prefix, part) for prefix, part in parts if part is not None]
