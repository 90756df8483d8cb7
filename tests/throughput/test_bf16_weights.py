"""One GPU, BF16: AdamW holding the matrices in bf16 with float32 masters (`TritonAdamW.hold_bf16`) trains as
autocast's casts do, and the clip's norm of bf16 gradients is taken in float32."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.common.backends import importable
from training.llama import parallel
from training.llama.model import LlamaShape
from training.throughput import llm
from training.throughput.config import ModelSpec, RunArgs

GPU = pytest.mark.skipif(
    not (torch.cuda.is_available() and importable("triton")), reason="Triton AdamW: GPUs"
)


def test_the_clip_norms_bf16_gradients_in_float32():
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(shape, generator=gen).bfloat16() for shape in ((300, 7), (1001,), (5, 5))]
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    norm = parallel.clip_grad_norm_(params, max_norm=1e9)
    exact = torch.cat([g.double().flatten() for g in grads]).norm()
    # torch's own total norm rounds each bf16 gradient's norm to bf16 (up to 2^-9 off)
    assert norm.dtype == torch.float32 and abs(float(norm) - float(exact)) <= 1e-6 * float(exact)


def build(bf16_weights: bool, grad_accum: int = 1, compile: bool = False):
    shape = LlamaShape(
        num_layers=2,
        hidden_size=256,
        ffn_hidden_size=512,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=1024,
        max_seq_length=128,
    )
    spec = ModelSpec("tiny", "llama", Path("tiny.json"), shape=shape)
    args = RunArgs(
        Path("tiny.json"),
        "llama",
        batch_size=2,
        grad_accum=grad_accum,
        enable_compile=compile,
        bf16_weights=bf16_weights,
    )
    torch.manual_seed(0)
    return llm.build(spec, args, torch.device("cuda"), None, 1)


@GPU
@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_held_bf16_weights_train_as_autocast_does(compile):
    runs = {}
    for held in (False, True):
        torch._dynamo.reset()
        workload = build(held, compile=compile)
        step = workload.make_step(2, 1)
        losses = [float(step()) for _ in range(4)]
        runs[held] = workload, losses
    (auto, auto_losses), (ours, our_losses) = runs[False], runs[True]
    assert "kept in bf16 by AdamW" in ours.backends["precision"]
    assert "kept in bf16" not in auto.backends["precision"]
    assert ours.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    assert ours.model.layers[0].input_layernorm.weight.dtype == torch.float32  # (matrices only)
    assert our_losses[0] == auto_losses[0]  # the same bf16 weights
    assert our_losses == pytest.approx(auto_losses, rel=1e-5)  # the same updates (the norm's sum aside)
    for name, p in auto.model.named_parameters():
        q = ours.model.get_parameter(name)
        want = p.detach().to(q.dtype).float()
        torch.testing.assert_close(q.detach().float(), want, rtol=1e-2, atol=1e-4, msg=name)
    with pytest.raises(ValueError, match="one iteration per step, not 2"):
        ours.make_step(2, 2)


@GPU
def test_several_iterations_per_step_keep_autocast():
    workload = build(True, grad_accum=2)
    assert "kept in bf16" not in workload.backends["precision"]
    assert workload.model.layers[0].mlp.up_proj.weight.dtype == torch.float32
