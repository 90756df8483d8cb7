"""Flash attention for BERT's packed rows, with attention dropout, in Triton (`ATTENTION=triton`).

Each row holds up to 3 sequences back to back, then padding; a token attends only to tokens of its own
sequence (`seq_ids`). cuDNN's kernel does this with a dense [L, L] mask and computes every block; this one
visits, for each block of queries, only the key blocks that its sequences span, and for each block of keys
only those query blocks, so about half of the work of a row of 2 sequences is skipped. Dropout on the
attention probabilities uses counter-based random numbers (philox, keyed by a per-call seed drawn from
PyTorch's generator and the element's (row, head, query, key) index), regenerated in the backward pass.

The forward pass is FlashAttention-2's online softmax; the backward pass one kernel for dK/dV (looping over
query blocks) and one for dQ (looping over key blocks), with D = rowsum(dO * O). q, k and v are read in
place from the fused qkv projection's output, [B, L, 3, heads, head_dim]; the gradient comes back in that
layout too. Wrapped as custom ops, so torch.compile treats each as one opaque call.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
BLOCK = 64  # queries and keys per block; L must be a multiple


@triton.jit
def _dropout_keep(seed, bh, offs_m, offs_n, L, p_drop):
    """True where the probability (query m, key n) of row-head bh is kept; the same in every kernel."""
    return tl.rand(seed, (bh * L + offs_m[:, None]) * L + offs_n[None, :]) >= p_drop


@triton.jit
def _fwd(QKV, O, LSE, SEQ, START, END, SEED, scale, p_drop, s_b, s_t, s_ob, s_ot,
         L, H: tl.constexpr, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
         DROPOUT: tl.constexpr):  # fmt: skip
    m_blk, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    offs_m, offs_n0, offs_d = m_blk * BM + tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, D)
    base = QKV + b * s_b + h * D
    q = tl.load(base + offs_m[:, None] * s_t + offs_d[None, :])
    sid_q = tl.load(SEQ + b * L + offs_m)
    lo = tl.load(START + b * L + m_blk * BM) // BN * BN
    hi = tl.load(END + b * L + m_blk * BM + BM - 1)
    seed = tl.load(SEED)
    m_i = tl.full([BM], -1.0e30, tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for start_n in range(lo, hi, BN):
        offs_n = start_n + offs_n0
        k = tl.load(base + H * D + offs_n[None, :] * s_t + offs_d[:, None])  # [D, BN]
        s = tl.dot(q, k) * (scale * 1.4426950408889634)
        same = sid_q[:, None] == tl.load(SEQ + b * L + offs_n)[None, :]
        s = tl.where(same, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        if DROPOUT:
            p = tl.where(_dropout_keep(seed, bh, offs_m, offs_n, L, p_drop), p, 0.0)
        v = tl.load(base + 2 * H * D + offs_n[:, None] * s_t + offs_d[None, :])
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    if DROPOUT:
        acc = acc / (1.0 - p_drop)
    tl.store(O + b * s_ob + h * D + offs_m[:, None] * s_ot + offs_d[None, :], acc.to(O.dtype.element_ty))
    tl.store(LSE + bh * L + offs_m, m_i + tl.math.log2(l_i))


@triton.jit
def _bwd_dkdv(QKV, DO, LSE, DELTA, DQKV, SEQ, START, END, SEED, scale, p_drop, s_b, s_t, s_ob, s_ot,
              L, H: tl.constexpr, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
              DROPOUT: tl.constexpr):  # fmt: skip
    n_blk, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    offs_n, offs_m0, offs_d = n_blk * BN + tl.arange(0, BN), tl.arange(0, BM), tl.arange(0, D)
    base, dbase = QKV + b * s_b + h * D, DQKV + b * s_b + h * D
    k = tl.load(base + H * D + offs_n[:, None] * s_t + offs_d[None, :])
    v = tl.load(base + 2 * H * D + offs_n[:, None] * s_t + offs_d[None, :])
    sid_k = tl.load(SEQ + b * L + offs_n)
    lo = tl.load(START + b * L + n_blk * BN) // BM * BM
    hi = tl.load(END + b * L + n_blk * BN + BN - 1)
    seed = tl.load(SEED)
    dk = tl.zeros([BN, D], tl.float32)
    dv = tl.zeros([BN, D], tl.float32)
    for start_m in range(lo, hi, BM):
        offs_m = start_m + offs_m0
        q = tl.load(base + offs_m[:, None] * s_t + offs_d[None, :])
        do = tl.load(DO + b * s_ob + h * D + offs_m[:, None] * s_ot + offs_d[None, :])
        lse = tl.load(LSE + bh * L + offs_m)
        s = tl.dot(q, tl.trans(k)) * (scale * 1.4426950408889634)  # [BM, BN]
        same = tl.load(SEQ + b * L + offs_m)[:, None] == sid_k[None, :]
        p = tl.where(same, tl.math.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v))
        if DROPOUT:
            keep = _dropout_keep(seed, bh, offs_m, offs_n, L, p_drop)
            pd = tl.where(keep, p / (1.0 - p_drop), 0.0)
            dp = tl.where(keep, dp / (1.0 - p_drop), 0.0)
        else:
            pd = p
        dv += tl.dot(tl.trans(pd.to(do.dtype)), do)
        ds = p * (dp - tl.load(DELTA + bh * L + offs_m)[:, None])
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
    out = offs_n[:, None] * s_t + offs_d[None, :]
    tl.store(dbase + H * D + out, (dk * scale).to(DQKV.dtype.element_ty))
    tl.store(dbase + 2 * H * D + out, dv.to(DQKV.dtype.element_ty))


@triton.jit
def _bwd_dq(QKV, DO, LSE, DELTA, DQKV, SEQ, START, END, SEED, scale, p_drop, s_b, s_t, s_ob, s_ot,
            L, H: tl.constexpr, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
            DROPOUT: tl.constexpr):  # fmt: skip
    m_blk, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    offs_m, offs_n0, offs_d = m_blk * BM + tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, D)
    base = QKV + b * s_b + h * D
    q = tl.load(base + offs_m[:, None] * s_t + offs_d[None, :])
    do = tl.load(DO + b * s_ob + h * D + offs_m[:, None] * s_ot + offs_d[None, :])
    lse = tl.load(LSE + bh * L + offs_m)
    delta = tl.load(DELTA + bh * L + offs_m)
    sid_q = tl.load(SEQ + b * L + offs_m)
    lo = tl.load(START + b * L + m_blk * BM) // BN * BN
    hi = tl.load(END + b * L + m_blk * BM + BM - 1)
    seed = tl.load(SEED)
    dq = tl.zeros([BM, D], tl.float32)
    for start_n in range(lo, hi, BN):
        offs_n = start_n + offs_n0
        k = tl.load(base + H * D + offs_n[:, None] * s_t + offs_d[None, :])
        v = tl.load(base + 2 * H * D + offs_n[:, None] * s_t + offs_d[None, :])
        s = tl.dot(q, tl.trans(k)) * (scale * 1.4426950408889634)
        same = sid_q[:, None] == tl.load(SEQ + b * L + offs_n)[None, :]
        p = tl.where(same, tl.math.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v))
        if DROPOUT:
            dp = tl.where(_dropout_keep(seed, bh, offs_m, offs_n, L, p_drop), dp / (1.0 - p_drop), 0.0)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)
    tl.store(
        DQKV + b * s_b + h * D + offs_m[:, None] * s_t + offs_d[None, :],
        (dq * scale).to(DQKV.dtype.element_ty),
    )


def sequence_bounds(seq_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, L] sequence ids (runs of equal ids) -> each token's run start and end (exclusive), int32."""
    B, L = seq_ids.shape
    t = torch.arange(L, device=seq_ids.device).expand(B, L)
    new = torch.ones_like(seq_ids, dtype=torch.bool)
    new[:, 1:] = seq_ids[:, 1:] != seq_ids[:, :-1]
    start = torch.where(new, t, 0).cummax(1).values
    last = torch.ones_like(new)
    last[:, :-1] = new[:, 1:]
    end = torch.where(last, t + 1, L).flip(1).cummin(1).values.flip(1)
    return start.int().contiguous(), end.int().contiguous()


def _launch_args(qkv, seq_ids):
    B, L, _, H, D = qkv.shape
    if L % BLOCK or qkv.stride(-1) != 1 or qkv.stride(3) != D or qkv.stride(2) != H * D:
        raise ValueError(f"triton attention needs L % {BLOCK} == 0 and qkv laid out as [B, L, 3, H, D]")
    if B * H * L * L >= 2**31:
        raise ValueError("triton attention: B x heads x L x L must stay below 2^31 (dropout counters)")
    start, end = sequence_bounds(seq_ids)
    return B, L, H, D, seq_ids.int().contiguous(), start, end


@torch.library.custom_op("mlperf_bert::packed_flash_fwd", mutates_args=())
def _flash_fwd(
    qkv: torch.Tensor, seq_ids: torch.Tensor, dropout_p: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    B, L, H, D, sid, start, end = _launch_args(qkv, seq_ids)
    out = qkv.new_empty(B, L, H, D)
    lse = torch.empty(B * H, L, device=qkv.device, dtype=torch.float32)
    seed = torch.randint(0, 2**31 - 1, (1,), device=qkv.device, dtype=torch.int64)
    _fwd[(L // BLOCK, B * H)](qkv, out, lse, sid, start, end, seed, D**-0.5, dropout_p,
                              qkv.stride(0), qkv.stride(1), out.stride(0), out.stride(1), L,
                              H=H, D=D, BM=BLOCK, BN=BLOCK, DROPOUT=dropout_p > 0)  # fmt: skip
    return out, lse, seed


@_flash_fwd.register_fake
def _(qkv, seq_ids, dropout_p):
    B, L, _, H, D = qkv.shape
    return (qkv.new_empty(B, L, H, D), qkv.new_empty(B * H, L, dtype=torch.float32),
            qkv.new_empty(1, dtype=torch.int64))  # fmt: skip


@torch.library.custom_op("mlperf_bert::packed_flash_bwd", mutates_args=())
def _flash_bwd(
    grad: torch.Tensor, qkv: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, seed: torch.Tensor,
    seq_ids: torch.Tensor, dropout_p: float,
) -> torch.Tensor:  # fmt: skip
    B, L, H, D, sid, start, end = _launch_args(qkv, seq_ids)
    grad = grad.contiguous()
    delta = (grad.float() * out.float()).sum(-1).permute(0, 2, 1).reshape(B * H, L).contiguous()
    dqkv = torch.empty_like(qkv, memory_format=torch.contiguous_format)
    args = (qkv, grad, lse, delta, dqkv, sid, start, end, seed, D**-0.5, dropout_p,
            qkv.stride(0), qkv.stride(1), grad.stride(0), grad.stride(1), L)  # fmt: skip
    meta = {"H": H, "D": D, "BM": BLOCK, "BN": BLOCK, "DROPOUT": dropout_p > 0}
    _bwd_dkdv[(L // BLOCK, B * H)](*args, **meta)
    _bwd_dq[(L // BLOCK, B * H)](*args, **meta)
    return dqkv


@_flash_bwd.register_fake
def _(grad, qkv, out, lse, seed, seq_ids, dropout_p):
    return torch.empty_like(qkv, memory_format=torch.contiguous_format)


def _setup(ctx, inputs, output):
    qkv, seq_ids, dropout_p = inputs
    out, lse, seed = output
    ctx.save_for_backward(qkv, out, lse, seed, seq_ids)
    ctx.dropout_p = dropout_p


def _backward(ctx, grad, *_):
    qkv, out, lse, seed, seq_ids = ctx.saved_tensors
    return _flash_bwd(grad, qkv, out, lse, seed, seq_ids, ctx.dropout_p), None, None


_flash_fwd.register_autograd(_backward, setup_context=_setup)


def packed_flash_attention(qkv: torch.Tensor, seq_ids: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    """qkv [B, L, 3, heads, head_dim] (the fused projection's output), seq_ids [B, L] -> context
    [B, L, heads, head_dim]."""
    return _flash_fwd(qkv, seq_ids, dropout_p)[0]
