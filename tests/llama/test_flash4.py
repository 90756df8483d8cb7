"""FlashAttention-4 as attention backend `flash4` (`training.llama.flash4`), on the CPU: the package's kernels
are replaced by a float64 stand-in with their calling convention (batch or packed layout, the log-sum-exp's
shape, the window as (left, right)), so what is checked is our side: the custom ops, their fake kernels under
torch.compile, the autograd wiring and the translation of causal / packed / windowed attention. The real
kernels are checked against SDPA on the GPU by `flash4_fault`, which `choose_attention` runs."""

from __future__ import annotations

import functools
import sys
import types

import pytest
import torch

from training.llama import flash4
from training.llama.attention import choose_attention
from training.llama.model import Llama, LlamaShape


def _masked_scores(q, k, cu, left):
    """Scores (heads, s, s) of one sequence's (s, heads, dim) tensors, -inf outside the kernels' mask."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = torch.einsum("ihd,jhd->hij", q, k) / q.shape[-1] ** 0.5
    i = torch.arange(q.shape[0])
    allowed = i[None, :] <= i[:, None]
    if left is not None:
        allowed &= i[None, :] >= i[:, None] - left
    if cu is not None:
        seq = torch.bucketize(i, cu[1:], right=True)
        allowed &= seq[None, :] == seq[:, None]
    return scores.masked_fill(~allowed, float("-inf"))


def _fake_attention(q, k, v, cu, left):
    """(out, lse) in the kernels' layouts, float64."""
    rows = [(q, k, v)] if cu is not None else list(zip(q, k, v))
    outs, lses = [], []
    for qq, kk, vv in rows:
        scores = _masked_scores(qq.double(), kk.double(), cu, left)
        vv = vv.double().repeat_interleave(qq.shape[1] // vv.shape[1], dim=1)
        outs.append(torch.einsum("hij,jhd->ihd", scores.softmax(-1), vv))
        lses.append(scores.logsumexp(-1))
    if cu is not None:
        return outs[0], lses[0]  # (total, heads, dim), (heads, total)
    return torch.stack(outs), torch.stack(lses)  # (batch, seq, heads, dim), (batch, heads, seq)


def _fake_gradients(q, k, v, dout, cu, left):
    """dq, dk, dv of one sequence by the softmax's formulas (custom ops run below autograd)."""
    groups = q.shape[1] // k.shape[1]
    p = _masked_scores(q, k, cu, left).softmax(-1)  # (heads, i, j)
    kk, vv = (t.repeat_interleave(groups, dim=1) for t in (k, v))
    dv = torch.einsum("hij,ihd->jhd", p, dout)
    dp = torch.einsum("ihd,jhd->hij", dout, vv)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True)) / q.shape[-1] ** 0.5
    dq = torch.einsum("hij,jhd->ihd", ds, kk)
    dk = torch.einsum("hij,ihd->jhd", ds, q)
    fold = lambda t: t.unflatten(1, (k.shape[1], groups)).sum(2)  # noqa: E731 - the query heads' shares
    return dq, fold(dk), fold(dv)


@pytest.fixture
def kernels(monkeypatch):
    """A stand-in `flash_attn.cute.interface` recording each call's keyword arguments."""
    calls = []

    def fwd(
        q,
        k,
        v,
        *,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        causal,
        window_size_left,
        window_size_right,
        return_lse,
    ):
        calls.append(("fwd", cu_seqlens_q is not None, max_seqlen_q, window_size_left, window_size_right))
        assert causal and return_lse and cu_seqlens_q is cu_seqlens_k and max_seqlen_q == max_seqlen_k
        out, lse = _fake_attention(q, k, v, cu_seqlens_q, window_size_left)
        return out.to(q.dtype), lse.float(), None, None, None

    def bwd(
        q,
        k,
        v,
        out,
        dout,
        lse,
        *,
        causal,
        window_size_left,
        window_size_right,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
    ):
        calls.append(("bwd", cu_seqlens_q is not None, max_seqlen_q, window_size_left, window_size_right))
        assert lse.shape == _fake_attention(q, k, v, cu_seqlens_q, window_size_left)[1].shape
        rows = [(q, k, v, dout)] if cu_seqlens_q is not None else list(zip(q, k, v, dout))
        grads = [_fake_gradients(*(t.double() for t in row), cu_seqlens_q, window_size_left) for row in rows]
        grads = [torch.stack(g) for g in zip(*grads)] if cu_seqlens_q is None else grads[0]
        return tuple(g.to(t.dtype) for g, t in zip(grads, (q, k, v)))

    interface = types.ModuleType("flash_attn.cute.interface")
    interface._flash_attn_fwd, interface._flash_attn_bwd = fwd, bwd
    for name in ("flash_attn", "flash_attn.cute"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "flash_attn.cute.interface", interface)
    return calls


CASES = {
    "causal": ({}, (False, None, None, None)),
    "packed": ({"cu_seqlens": torch.tensor([0, 7, 20, 24])}, (True, 13, None, None)),
    "windowed": ({"window": 5}, (False, None, 4, 0)),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", CASES)
def test_flash4_gives_the_reference_attention_and_gradients(kernels, case, compiled):
    kwargs, expected_call = CASES[case]
    torch.manual_seed(0)
    batch = 1 if "cu_seqlens" in kwargs else 2
    q = torch.randn(batch, 24, 4, 8, requires_grad=True)
    k, v = (torch.randn(batch, 24, 2, 8, requires_grad=True) for _ in range(2))
    fn = flash4.flash4_attention
    if compiled:  # one graph: the ops' fake kernels stand for the kernels while tracing
        torch._dynamo.reset()
        fn = torch.compile(fn, backend="aot_eager", fullgraph=True)
    out = fn(q, k, v, **kwargs)
    g = torch.randn_like(out)
    (out * g).sum().backward()
    got = [out.detach()] + [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    (flash4.reference(q, k, v, **kwargs) * g).sum().backward()
    want = [flash4.reference(q, k, v, **kwargs).detach()] + [t.grad for t in (q, k, v)]
    for name, a, b in zip(("output", "dq", "dk", "dv"), got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{case} {n}: {m}")
    assert [c[1:] for c in kernels] == [expected_call, expected_call]
    assert [c[0] for c in kernels] == ["fwd", "bwd"]


def test_a_model_on_flash4_computes_what_it_computes_on_sdpa(kernels):
    shape = LlamaShape(
        num_layers=2,
        hidden_size=32,
        ffn_hidden_size=64,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=64,
        max_seq_length=16,
        rope_theta=10000.0,
        rope_scaling=None,
    )
    torch.manual_seed(0)
    ours = Llama(shape, "flash4")
    ours.init_weights()
    peer = Llama(shape, "sdpa")
    peer.load_state_dict(ours.state_dict())
    tokens = torch.randint(0, 64, (2, 16))
    torch.testing.assert_close(ours(tokens), peer(tokens), rtol=1e-4, atol=1e-5)
    assert sum(c[0] == "fwd" for c in kernels) == shape.num_layers


def test_flash4_is_refused_by_name_where_it_cannot_run():
    with pytest.raises(ValueError, match="ATTENTION=flash4 .*not an NVIDIA GPU"):
        choose_attention("flash4", torch.device("cpu"))
    assert choose_attention("auto", torch.device("cpu")) == "sdpa"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlashAttention-4 needs a GPU")
def test_flash4_matches_sdpa_on_the_gpu_and_is_what_auto_picks():
    """Where flash-attn-4 is installed on an NVIDIA Hopper or Blackwell GPU, its kernels match SDPA (causal,
    packed, windowed; forward and backward: `flash4_fault`) and `auto` picks them."""
    from training.common.backends import importable

    device = torch.device("cuda")
    if not importable("flash_attn.cute") or torch.cuda.get_device_capability()[0] not in (9, 10):
        pytest.skip("flash-attn-4 is not installed, or not a Hopper or Blackwell GPU")
    assert flash4.flash4_fault(device) == ""
    assert choose_attention("auto", device) == "flash4"
    assert choose_attention("auto", device, window=4096) == "flash4"


def test_the_kernel_check_passes_a_match_and_names_what_is_off():
    generator = torch.Generator().manual_seed(0)
    exact = [torch.randn(1, 64, heads, 16, generator=generator) for heads in (4, 2, 2)]
    assert flash4.kernel_fault(flash4.reference, flash4.reference, exact, generator, "SDPA's") == ""
    windowed = functools.partial(flash4.reference, window=8)  # a kernel that masks too much
    assert flash4.kernel_fault(windowed, flash4.reference, exact, generator, "SDPA's").startswith(
        "its output is off SDPA's by "
    )
