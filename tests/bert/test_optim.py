"""LAMB against a plain float64 reference; the LR schedule at known steps."""

import math

import pytest
import torch

from training.bert.optim import Lamb, poly_warmup_lr


def reference_lamb_step(params, grads, state, lr, b1, b2, eps, wds, max_norm, step):
    """Textbook apex FusedLAMB step, one tensor at a time, in float64."""
    gnorm = math.sqrt(sum(float((g**2).sum()) for g in grads))
    clip = max(1.0, gnorm / max_norm)
    out = []
    for i, (p, g, wd) in enumerate(zip(params, grads, wds)):
        g = g / clip
        m, v = state[i]
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        state[i] = (m, v)
        upd = (m / (1 - b1**step)) / ((v / (1 - b2**step)).sqrt() + eps) + wd * p
        ratio = 1.0
        if wd:
            w, u = float(p.norm()), float(upd.norm())
            ratio = w / u if w > 0 and u > 0 else 1.0
        out.append(p - lr * ratio * upd)
    return out


def test_lamb_matches_float64_reference():
    torch.manual_seed(0)
    shapes = [(7, 5), (5,), (3, 4, 2), (11,)]
    wds = [0.1, 0.0, 0.1, 0.0]
    params = [torch.nn.Parameter(torch.randn(s, dtype=torch.float64)) for s in shapes]
    opt = Lamb(
        [{"params": [p], "weight_decay": wd} for p, wd in zip(params, wds)],
        lr=0.01,
        betas=(0.6, 0.99),
        eps=1e-6,
        max_grad_norm=1.0,
    )
    ref = [p.detach().clone() for p in params]
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in ref]
    for step in range(1, 4):
        grads = [torch.randn(s, dtype=torch.float64) * 3 for s in shapes]  # norm > 1: clipping is exercised
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        ref = reference_lamb_step(ref, grads, state, 0.01, 0.6, 0.99, 1e-6, wds, 1.0, step)
        for p, r in zip(params, ref):
            torch.testing.assert_close(p.detach(), r, rtol=1e-12, atol=1e-12)


def test_lamb_zero_weights_use_unit_trust_ratio():
    p = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    p.grad = torch.ones(4, dtype=torch.float64)
    Lamb([{"params": [p], "weight_decay": 0.1}], lr=0.5).step()
    assert torch.all(torch.isfinite(p)) and torch.all(p < 0)


@pytest.mark.parametrize(
    "step, expected",
    [(0, 1e-3), (500, 0.5e-3), (1000, 0.0), (1200, 0.0)],
)
def test_poly_decay_without_warmup(step, expected):
    assert poly_warmup_lr(step, 1e-3, total_steps=1000, warmup_steps=0) == pytest.approx(expected)


def test_linear_warmup_then_decay():
    lr = [poly_warmup_lr(s, 1.0, total_steps=100, warmup_steps=10) for s in (0, 5, 10, 55)]
    assert lr == pytest.approx([0.0, 0.5, 0.9, 0.45])
    # start_warmup_step < 0 (NVIDIA's multi-node configs) starts the run part-way through warmup; NVIDIA's
    # scheduler then counts the first step as 1 (its offset_step is 0 unless the warm-up starts at 0)
    assert poly_warmup_lr(0, 1.0, 100, warmup_steps=20, start_warmup_step=-10) == pytest.approx(0.55)
    # NVIDIA v4.0's 8 x 8 H100 config: -200000 of 200330 steps; the first step at (200000 + 1) / 200330
    lr = [
        poly_warmup_lr(s, 2.58e-3, 700, warmup_steps=200330, start_warmup_step=-200000) for s in (0, 329, 330)
    ]
    assert lr == pytest.approx(
        [2.58e-3 * 200001 / 200330, 2.58e-3 * (1 - 330 / 700), 2.58e-3 * (1 - 331 / 700)]
    )
