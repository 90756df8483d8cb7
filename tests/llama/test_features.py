"""The apply_* features on CPU: each off by default, and when on, the same numbers (within its precision)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import training.fp8.apply as fp8_module
from tests.llama.helpers import TINY, no_fp8_backend
from training.fp8 import Fp8Settings, MlpLayout, apply_fp8
from training.llama import parallel
from training.llama.checkpointing import Checkpointed
from training.llama.model import MLP, Llama, compiled_cross_entropy, cross_entropy

SHAPE = TINY


def loss_and_grads(model: Llama, fp8=None, loss_fn=cross_entropy):
    torch.manual_seed(5)
    tokens = torch.randint(0, SHAPE.vocab_size, (2, 32))
    with fp8.forward_context() if fp8 else torch.enable_grad():
        loss = loss_fn(model(tokens), tokens.roll(-1, 1))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def fresh() -> Llama:
    torch.manual_seed(0)
    model = Llama(SHAPE)
    model.init_weights()
    return model


def test_features_off_are_no_ops():
    model = fresh()
    assert apply_fp8(model, None).description == "off"
    assert [
        parallel.apply_tp(model, None),
        parallel.apply_activation_checkpointing(model, False),
        parallel.apply_compile(model, False),
        parallel.apply_fsdp(model, None, torch.float32),
    ] == [parallel.Change(0, "off")] * 4
    assert all(type(m) is nn.Linear for m in model.modules() if isinstance(m, nn.Linear))


def test_activation_checkpointing_and_compile_keep_the_numbers():
    loss, grads = loss_and_grads(fresh())
    model = fresh()
    assert parallel.apply_activation_checkpointing(model, True) == parallel.Change(
        2, "full recompute of 2 of 2 blocks"
    )
    assert parallel.apply_compile(model, True).description.startswith("torch.compile per block")
    assert [n for n, _ in model.named_parameters()] == list(grads)  # names unchanged (checkpoints load as-is)
    assert list(model.state_dict()) == list(fresh().state_dict())  # (the wrappers hold the blocks' children)
    assert all(isinstance(block, Checkpointed) and block.recompute for block in model.layers)
    loss2, grads2 = loss_and_grads(model, loss_fn=compiled_cross_entropy)  # what COMPILE=1 trains with
    torch.testing.assert_close(loss2, loss, atol=1e-5, rtol=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(grads2[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_fp8_blocks_compile_inside_their_checkpoint_and_keep_the_numbers():
    """With FP8 on, a checkpointed block compiles its forward inside the eager checkpoint (compiled with the
    checkpoint, our FP8 functions' saved tensors were kept, not recomputed: seen on GPUs); the others whole.
    The eager model's loss, and its gradients up to FP8's rounding (e5m2 gradients: compiled kernels round
    a few elements differently from eager ones, as they did with the checkpoint compiled in)."""
    runs = []
    for compiled in (False, True):
        model = fresh()
        fp8 = apply_fp8(model, Fp8Settings("native"))
        parallel.apply_activation_checkpointing(model, True, layers=1)
        described = parallel.apply_compile(model, compiled, checkpoint_outside=True)
        runs.append(loss_and_grads(model, fp8))
    assert "(2 blocks, 1 of them inside their eager checkpoint (FP8))" in described.description
    first, second = model.layers
    assert first.compiled_inside and first._compiled_call_impl is None  # its parts, not the wrapper
    assert not second.compiled_inside and second._compiled_call_impl is not None
    (loss, grads), (loss2, grads2) = runs
    torch.testing.assert_close(loss2, loss, atol=1e-5, rtol=1e-5)
    for name, grad in grads.items():
        similarity = nn.functional.cosine_similarity(grads2[name].flatten(), grad.flatten(), 0)
        assert similarity > 0.98, (name, similarity)


@pytest.mark.parametrize("backend,linear", [("torchao", "Float8Linear"), ("native", "Fp8Linear")])
def test_fp8_swaps_the_block_linears_only(backend, linear):
    if backend == "torchao":
        pytest.importorskip("torchao")
    loss, _ = loss_and_grads(fresh())
    model = fresh()
    fp8 = apply_fp8(model, Fp8Settings(backend, "tensorwise"))
    assert fp8.backend == backend and "14 linear layers" in fp8.description  # 2 blocks x 7 projections
    assert type(model.lm_head) is nn.Linear and type(model.layers[0].mlp.up_proj).__name__ == linear
    loss8, grads8 = loss_and_grads(model, fp8)
    assert abs(loss8 - loss) / loss < 0.02 and all(torch.isfinite(g).all() for g in grads8.values())


def native_fp8(fuse: bool) -> Llama:
    """A fresh model with native FP8 linears, each MLP fused into one function or linear by linear."""
    model = fresh()
    layout = MlpLayout(MLP, up="up_proj", down="down_proj", gate="gate_proj") if fuse else None
    fp8 = apply_fp8(model, Fp8Settings("native", fuse_mlp=layout))
    assert ("2 MLPs fused" in fp8.description) == fuse
    return model


def test_native_fp8_mlp_fused_gives_the_bits_of_its_three_linears():
    """With native FP8 the MLP runs as one function (`FusedFp8MLP`: x cast once, SwiGLU and its
    gradients written only in FP8): over 3 steps (the first casts with scale 1, the next with the amax
    recorded), the loss, every gradient and the amax buffers are those of the three `Fp8Linear`s run one
    by one. Compiled, the fused MLP matches eager within FP8's rounding."""
    runs = []
    for fuse in (False, True):
        model = native_fp8(fuse)
        steps = [loss_and_grads(model) for _ in range(3)]
        # all amax buffers but gate's input's (and its next), the same as up's (unused when fused)
        amax = {n: b.clone() for n, b in model.named_buffers() if "gate_proj.x_amax" not in n}
        runs.append((steps, amax))
    (unfused, amax), (fused, fused_amax) = runs
    assert len(amax) == 2 * 19  # 2 blocks x (7 gradients' + 6 inputs' amax, and each input's recorded next)
    assert all(torch.equal(fused_amax[n], a) for n, a in amax.items())
    for (loss, grads), (loss2, grads2) in zip(unfused, fused):
        assert torch.equal(loss, loss2)
        assert all(torch.equal(grads2[n], g) for n, g in grads.items())
    mlp = model.layers[0].mlp  # the fused run's, its amax recorded
    x = torch.randn(2, 32, SHAPE.hidden_size)
    with torch.no_grad():  # the compiler keeps silu(g) in float32 where eager rounds it to bf16
        y, want = torch.compile(mlp)(x), mlp(x)
    assert float((y - want).norm() / want.norm()) < 0.03


def test_fp8_auto_falls_back_to_native_and_needs_a_library_on_mi300(monkeypatch):
    """auto: ours where the OCP FP8 formats run (even where Transformer Engine is importable: ours is the path
    measured and checked here), else Transformer Engine, else torchao; an MI300-class GPU (FNUZ formats only)
    with neither library has no backend."""
    monkeypatch.setattr(fp8_module, "importable", lambda module: True)
    assert fp8_module.choose_backend("auto") == "native"
    monkeypatch.setattr(fp8_module, "importable", lambda module: False)
    assert apply_fp8(fresh(), Fp8Settings()).backend == "native"
    no_fp8_backend(monkeypatch)
    with pytest.raises(ValueError, match="neither is importable"):
        apply_fp8(fresh(), Fp8Settings())


def test_clip_folded_into_the_fused_optimizer_matches_scaling_the_gradients():
    """With a fused AdamW the clip coefficient goes to its `grad_scale` instead of a pass over the
    gradients; the update must be the one from clipped gradients (eps large: the gradient scale shows)."""
    updated = []
    for fold in (False, True):
        model = fresh()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=0.1, fused=True)
        params = list(model.parameters())
        for step in range(2):
            loss_and_grads(model)  # fills .grad
            norm = parallel.clip_grad_norm_(params, 0.05 * (step + 1), optimizer=optimizer if fold else None)
            assert norm > 0.1  # clipping is active
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        updated.append([p.detach().clone() for p in params])
    for a, b in zip(*updated):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fuse", [False, True])
def test_native_fp8_recompute_casts_with_the_forwards_scales(fuse):
    """Activation checkpointing recomputes each block's forward in the backward; the native FP8 linears (one
    by one, or the MLP fused) must cast there with the scales the first forward used, not with the amax that
    forward has just recorded: over 3 steps, the same loss, gradients and amax buffers as without it."""
    runs = []
    for checkpointed in (False, True):
        model = native_fp8(fuse)
        parallel.apply_activation_checkpointing(model, checkpointed)
        runs.append(([loss_and_grads(model) for _ in range(3)], dict(model.named_buffers())))
    (plain, amax), (recomputed, amax2) = runs
    for (loss, grads), (loss2, grads2) in zip(plain, recomputed):
        assert torch.equal(loss, loss2)
        assert all(torch.equal(grads2[n], g) for n, g in grads.items()), [
            n for n, g in grads.items() if not torch.equal(grads2[n], g)
        ]
    assert all(torch.equal(amax2[n], a) for n, a in amax.items())


def test_fp8_mlp_activations_apply_to_the_blocks_kept_for_their_backward():
    """FP8's `mlp_activations_in_fp8` with the first of 2 blocks recomputed (ACL=1): only the kept block's
    MLP keeps its SwiGLU inputs in FP8 (a recomputed block's saves last only through its own backward), and
    the FP8 line says how many."""
    from training.llama.build import FP8_MLP

    model = fresh()
    settings = Fp8Settings("native", fuse_mlp=FP8_MLP, mlp_activations_in_fp8=True)
    features = parallel.Features(fp8=settings, activation_checkpointing=True, checkpoint_layers=1)
    applied = parallel.apply_features(model, None, features)
    assert [block.recompute for block in model.layers] == [True, False]
    assert [block.mlp.saves_fp8 for block in model.layers] == [False, True]
    assert applied.fp8.description.endswith("the SwiGLU inputs of 1 MLPs kept for the backward in FP8")
    loss, grads = loss_and_grads(model)
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads.values())
