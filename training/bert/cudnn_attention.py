"""cuDNN's bf16 flash attention over BERT's packed rows, with attention dropout (backend `cudnn_ragged`).

The rows are flattened to tokens, and each sequence, and each row's padding run, is one entry of cuDNN's
ragged (THD) batch: `cu_seqlens` says where each begins, so no work crosses a sequence. Q, K and V are read in
place from the fused projection's output (cuDNN's "t3hd": a token's q, k and v side by side), and the
backward writes dQ, dK and dV into one tensor of that layout, the projection's input gradient, with no stack.
The batch is padded with empty entries to a multiple of `SEGMENTS_ROUND` (`data.pad_static` already gives
every compiled step the same count), so few graphs are built.

Dropout is cuDNN's Philox generator, seeded per call by a (seed, offset) pair drawn from PyTorch's CUDA
generator, so runs repeat under a seed; the backward reuses its forward's pair, so it drops what its forward
dropped (`check`). Under CUDA graphs that is not yet shown right (`tests/bert/test_model.py` checks a
graph's replays on a GPU), so `BertConfig` refuses this backend there.

Why our own op (two `torch.library` custom ops, fake kernels for torch.compile, the backward registered as
the forward's autograd formula): PyTorch reaches this kernel only through ATen's `_cudnn_attention_forward`
with cumulative lengths, which rebuilds its cuDNN graph on every call and whose backward with dropout does
not drop what its forward dropped (perf/RESULTS_ARCHIVE.md), and its `varlen_attn` has no dropout. Here each
graph is built once per shape through `nvidia-cudnn-frontend` and cached.
"""

from __future__ import annotations

import functools

import torch

from training.common import cudnn_graphs
from training.common.backends import importable

SEGMENTS_ROUND = 64  # the ragged batch is padded with empty entries to a multiple of this (few graphs)


def _layout(segments: int, length: int, heads: int, dim: int, per_token: int) -> tuple[tuple, tuple]:
    """cuDNN's (batch, heads, seq, dim) dims and strides for a ragged tensor whose tokens are `per_token`
    values apart (3 x heads x dim in the fused projection's output, heads x dim in O)."""
    return (segments, heads, length, dim), (length * per_token, dim, per_token, 1)


@functools.lru_cache(maxsize=16)
def _graphs(
    segments: int, length: int, heads: int, dim: int, tokens: int, dropout_p: float, device_index: int
):
    """The forward and backward graphs of one shape, built and planned once, each with its {name: tensor}."""
    cudnn = cudnn_graphs.cudnn()
    bf16, f32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
    i32, i64 = cudnn.data_type.INT32, cudnn.data_type.INT64
    qkv_dims, qkv_strides = _layout(segments, length, heads, dim, 3 * heads * dim)
    o_dims, o_strides = _layout(segments, length, heads, dim, heads * dim)
    stats_dims, stats_strides = (segments, heads, length, 1), (heads * length, length, 1, 1)
    built = []
    for backward in (False, True):
        g = cudnn.pygraph(
            io_data_type=bf16,
            intermediate_data_type=f32,
            compute_data_type=f32,
            handle=cudnn_graphs.handle(device_index),
        )

        def offsets(name: str, g=g):
            return g.tensor(name=name, dim=(segments + 1, 1, 1, 1), stride=(1, 1, 1, 1), data_type=i64)

        t = {"seq_len": g.tensor(name="seq_len", dim=(segments, 1, 1, 1), stride=(1, 1, 1, 1), data_type=i32)}
        for name in ("q", "k", "v"):
            t[f"{name}_offsets"] = offsets(f"{name}_offsets")
            t[name] = g.tensor(name=name, dim=qkv_dims, stride=qkv_strides, data_type=bf16)
            t[name].set_ragged_offset(t[f"{name}_offsets"])
        dropout = None
        if dropout_p > 0:
            t["seed"] = cudnn_graphs.scalar(g, "seed", i64)
            t["offset"] = cudnn_graphs.scalar(g, "offset", i64)
            dropout = (dropout_p, t["seed"], t["offset"])
        common = {
            "attn_scale": dim**-0.5,
            "use_padding_mask": True,
            "seq_len_q": t["seq_len"],
            "seq_len_kv": t["seq_len"],
            "dropout": dropout,
            "max_total_seq_len_q": tokens,
            "max_total_seq_len_kv": tokens,
        }
        if not backward:
            o, stats = g.sdpa(name="sdpa", q=t["q"], k=t["k"], v=t["v"], generate_stats=True, **common)
            t["o_offsets"] = offsets("o_offsets")
            o.set_output(True).set_dim(o_dims).set_stride(o_strides).set_data_type(bf16)
            o.set_ragged_offset(t["o_offsets"])
            stats.set_output(True).set_dim(stats_dims).set_stride(stats_strides).set_data_type(f32)
            t.update(o=o, stats=stats)
        else:
            for name in ("o", "dO"):
                t[f"{name}_offsets"] = offsets(f"{name}_offsets")
                t[name] = g.tensor(name=name, dim=o_dims, stride=o_strides, data_type=bf16)
                t[name].set_ragged_offset(t[f"{name}_offsets"])
            t["stats"] = g.tensor(name="stats", dim=stats_dims, stride=stats_strides, data_type=f32)
            grads = g.sdpa_backward(
                name="sdpa_backward",
                q=t["q"],
                k=t["k"],
                v=t["v"],
                o=t["o"],
                dO=t["dO"],
                stats=t["stats"],
                **common,
            )
            for name, grad in zip(("dq", "dk", "dv"), grads):
                t[f"{name}_offsets"] = offsets(f"{name}_offsets")
                grad.set_output(True).set_dim(qkv_dims).set_stride(qkv_strides).set_data_type(bf16)
                grad.set_ragged_offset(t[f"{name}_offsets"])
                t[name] = grad
        cudnn_graphs.plan(g)
        built.append((g, t))
    return built


def _bind(names: str, qkv: torch.Tensor, qkv_offsets: torch.Tensor) -> dict[str, torch.Tensor]:
    """q, k and v (or dq, dk, dv) as the slices of a (tokens, 3, heads, dim) tensor, with their offsets."""
    data = {}
    for i, name in enumerate(names.split()):
        data[name] = qkv[:, i]
        data[f"{name}_offsets"] = qkv_offsets
    return data


def _run(backward: bool, qkv, qkv_offsets, seq_lens, max_len: int, dropout_p: float, rng, bound) -> None:
    """Execute the forward or backward graph of `qkv`'s shape with q, k, v, the lengths and the dropout's
    (seed, offset) bound, and `bound`'s tensors."""
    tokens, _, heads, dim = qkv.shape
    built = _graphs(seq_lens.numel(), max_len, heads, dim, tokens, dropout_p, qkv.device.index or 0)
    data = {**_bind("q k v", qkv, qkv_offsets), "seq_len": seq_lens, **bound}
    if dropout_p > 0:
        data.update(seed=rng[0:1].view(1, 1, 1, 1), offset=rng[1:2].view(1, 1, 1, 1))
    cudnn_graphs.execute(*built[backward], data, qkv.device)


@torch.library.custom_op("mlperf_bert::cudnn_ragged_attention_fwd", mutates_args=())
def ragged_fwd(
    qkv: torch.Tensor,
    qkv_offsets: torch.Tensor,
    o_offsets: torch.Tensor,
    seq_lens: torch.Tensor,
    max_len: int,
    dropout_p: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(O (tokens, heads, dim), the softmax stats, the dropout's (seed, offset)) of attention within each
    ragged entry of a contiguous (tokens, 3, heads, dim) bf16 `qkv`; `qkv_offsets` and `o_offsets` are the
    entries' starts in elements (int64), `seq_lens` their lengths (int32)."""
    tokens, _, heads, dim = qkv.shape
    o = qkv.new_empty(tokens, heads, dim)
    stats = qkv.new_empty(seq_lens.numel(), heads, max_len, 1, dtype=torch.float32)
    rng = torch.randint(2**62, (2,), device=qkv.device, dtype=torch.int64)
    bound = {"o": o, "o_offsets": o_offsets, "stats": stats}
    _run(False, qkv, qkv_offsets, seq_lens, max_len, dropout_p, rng, bound)
    return o, stats, rng


@ragged_fwd.register_fake
def _(qkv, qkv_offsets, o_offsets, seq_lens, max_len, dropout_p):
    tokens, _, heads, dim = qkv.shape
    stats = qkv.new_empty(seq_lens.shape[0], heads, max_len, 1, dtype=torch.float32)
    return qkv.new_empty(tokens, heads, dim), stats, qkv.new_empty(2, dtype=torch.int64)


@torch.library.custom_op("mlperf_bert::cudnn_ragged_attention_bwd", mutates_args=())
def ragged_bwd(
    dout: torch.Tensor,
    qkv: torch.Tensor,
    o: torch.Tensor,
    stats: torch.Tensor,
    rng: torch.Tensor,
    qkv_offsets: torch.Tensor,
    o_offsets: torch.Tensor,
    seq_lens: torch.Tensor,
    max_len: int,
    dropout_p: float,
) -> torch.Tensor:
    """The gradient of `qkv` (tokens, 3, heads, dim) from that of `ragged_fwd`'s O, with its dropout."""
    dqkv = torch.empty_like(qkv)
    bound = {
        **_bind("dq dk dv", dqkv, qkv_offsets),
        "o": o,
        "dO": dout,
        "o_offsets": o_offsets,
        "dO_offsets": o_offsets,
        "stats": stats,
    }
    _run(True, qkv, qkv_offsets, seq_lens, max_len, dropout_p, rng, bound)
    return dqkv


@ragged_bwd.register_fake
def _(dout, qkv, o, stats, rng, qkv_offsets, o_offsets, seq_lens, max_len, dropout_p):
    return torch.empty_like(qkv)


def _setup(ctx, inputs, output):
    qkv, qkv_offsets, o_offsets, seq_lens, ctx.max_len, ctx.dropout_p = inputs
    o, stats, rng = output
    ctx.save_for_backward(qkv, o, stats, rng, qkv_offsets, o_offsets, seq_lens)


def _backward(ctx, dout, *_):
    qkv, o, stats, rng, *ragged = ctx.saved_tensors
    dqkv = ragged_bwd(dout.contiguous(), qkv, o, stats, rng, *ragged, ctx.max_len, ctx.dropout_p)
    return dqkv, None, None, None, None, None


ragged_fwd.register_autograd(_backward, setup_context=_setup)


def padded_segments(segments: int) -> int:
    """The ragged batch's entries for `segments` sequences and padding runs: a multiple of SEGMENTS_ROUND."""
    return segments + -segments % SEGMENTS_ROUND


def ragged_attention(
    qkv: torch.Tensor, cu_seqlens: torch.Tensor, max_len: int, dropout_p: float
) -> torch.Tensor:
    """Attention within each of the sequences `cu_seqlens` (int32, from 0 to the token count) marks in the
    flattened rows of `qkv` (tokens, 3, heads, dim), with attention dropout: (tokens, heads, dim)."""
    _, _, heads, dim = qkv.shape
    extra = padded_segments(cu_seqlens.numel() - 1) - (cu_seqlens.numel() - 1)
    if extra:
        cu_seqlens = torch.cat([cu_seqlens, cu_seqlens[-1:].expand(extra)])
    starts = cu_seqlens.to(torch.int64)
    seq_lens = cu_seqlens.diff().to(torch.int32)
    o, _, _ = ragged_fwd(
        qkv.contiguous(), starts * (3 * heads * dim), starts * (heads * dim), seq_lens, max_len, dropout_p
    )
    return o


@functools.cache
def cudnn_ragged_fault(device_index: int = 0) -> str | None:
    """Why cuDNN's ragged attention cannot run here, or None: it needs nvidia-cudnn-frontend on an NVIDIA GPU
    of compute capability 9 or more (cuDNN's ragged layout), and on a small packed case it must match
    float32 attention (no dropout) and, with dropout, drop in its backward what its forward dropped."""
    if not (torch.cuda.is_available() and torch.version.cuda):
        return "it needs an NVIDIA GPU and a CUDA build of PyTorch"
    if not importable("cudnn"):
        return "nvidia-cudnn-frontend is not installed (pip install nvidia-cudnn-frontend)"
    device = torch.device("cuda", device_index)
    if torch.cuda.get_device_capability(device)[0] < 9:
        capability = torch.cuda.get_device_capability(device)
        return f"compute capability {capability} (cuDNN's ragged layout: 9.0 or more)"
    try:
        errors = check(device)
    except Exception as err:  # noqa: BLE001 - any failure means: do not use it
        return f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    bounds = {name: IDENTITY_TOLERANCE if name == "dropout identity" else TOLERANCE for name in errors}
    worst = max(errors, key=lambda name: errors[name] / bounds[name])
    if not errors[worst] <= bounds[worst]:
        return f"its {worst} is off by {errors[worst]:.3g} (relative, > {bounds[worst]:.3g})"
    return None


# bf16 inputs and outputs around float32 arithmetic: each value rounded to bf16 (2^-8 relative) a few times
TOLERANCE = 4 * 2**-8


def check(device: torch.device, heads: int = 2, dim: int = 64) -> dict[str, float]:
    """Relative errors (norm-wise) on two packed rows of 256 tokens with empty entries at the end, as
    `data.pad_static` leaves them: O and the gradients against float32 attention under a block-diagonal mask
    without dropout, and with dropout 0.5 `dropout_identity_error`."""
    from training.bert.attention import block_diagonal_mask

    generator = torch.Generator(device=device).manual_seed(0)
    rows, length = 2, 256
    cu = torch.tensor([0, 100, 200, 256, 300, 512, 512, 512], dtype=torch.int32, device=device)
    seq_ids = torch.zeros(rows * length, dtype=torch.int64, device=device)
    for i, (start, end) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        seq_ids[start:end] = i + 1
    exact = torch.randn(rows * length, 3, heads, dim, device=device, generator=generator)
    grad = torch.randn(rows * length, heads, dim, device=device, generator=generator)
    slow = exact.clone().requires_grad_()
    per_row = slow.view(rows, length, 3, heads, dim).permute(2, 0, 3, 1, 4)  # 3, rows, heads, length, dim
    mask = block_diagonal_mask(seq_ids.view(rows, length))
    want = torch.nn.functional.scaled_dot_product_attention(*per_row, attn_mask=mask)
    want = want.permute(0, 2, 1, 3).reshape(rows * length, heads, dim)
    (want * grad).sum().backward()
    errors = {}
    for p in (0.0, 0.5):
        fast = exact.bfloat16().requires_grad_()
        got = ragged_attention(fast, cu, length, p)
        got.backward(grad.bfloat16())
        if p == 0:
            errors["output"] = _error(got, want)
            for i, name in enumerate(("dq", "dk", "dv")):
                errors[name] = _error(fast.grad[:, i], slow.grad[:, i])
        else:
            errors["dropout identity"] = dropout_identity_error(
                got, grad.bfloat16(), fast[:, 2], fast.grad[:, 2], cu
            )
    return errors


# The identity below in bf16: O and dV are rounded to bf16 (2^-9 relative each, random in sign), which leaves
# each sequence's and head's sums apart by a few 2^-9 of their size; a backward that drops other elements
# than its forward leaves them apart by a sizeable fraction of their size.
IDENTITY_TOLERANCE = 2**-5


def dropout_identity_error(out, dout, v, dv, cu_seqlens) -> float:
    """For attention with dropout, O = P_dropped V within each sequence and head, so there
    <O, dO> = <V, dV> when the backward drops what the forward dropped: the relative distance (norm-wise)
    between those two sums over every (sequence, head). All (tokens, heads, dim); `cu_seqlens` int32."""
    lengths = cu_seqlens.diff().long()
    sequence = torch.repeat_interleave(torch.arange(len(lengths), device=out.device), lengths)
    sums = []
    for a, b in ((out, dout), (v, dv)):
        per_token = (a.detach().double() * b.detach().double()).sum(-1)  # (tokens, heads)
        sums.append(per_token.new_zeros(len(lengths), per_token.shape[1]).index_add_(0, sequence, per_token))
    return float((sums[0] - sums[1]).norm() / sums[0].norm())


def _error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).norm() / want.norm())
