"""FP8 attention (NVIDIA's `FP8_DPA`) for the Llama blocks: cuDNN's FP8 scaled-dot-product attention, forward
and backward, through the `nvidia-cudnn-frontend` package's graph API (`sdpa_fp8`, `sdpa_fp8_backward`), as
attention backend `cudnn_fp8`: causal, grouped-query, packed rows.

Why this module: cuDNN's FP8 kernels take per-tensor scales and e4m3 operands, and neither PyTorch nor the
frontend wraps them as a differentiable op. Here the forward and backward are two `torch.library` custom ops
(fake kernels for torch.compile, the backward registered as the forward's autograd formula, as
`training.llama.flash4` does), each one cuDNN graph built once per shape and cached.

The numbers (what Transformer Engine's FP8 DPA computes on Hopper, with current scaling where it can):
- Q, K, V (bf16) are cast to e4m3 each by its own max |x| (one amax pass, one cast; `training.fp8.casts`);
  the backward's dO likewise. The kernels multiply e4m3 operands and accumulate in float32.
- The softmax probabilities P are quantized for P.V with scale 448: P <= 1, and P = 1 is reached (the first
  query sees only itself), so 448 / max P is 448.
- dP = dO.V^T, and dS = P * (dP - rowsum(dO * O)), are quantized in the backward with a scale the kernel
  cannot measure first (Hopper has no current scaling there), and so are dQ, dK, dV where they come out in
  e4m3. Their scales are delayed, as Transformer Engine's are: 448 over the largest amax the kernel reported
  in the layer's last `AMAX_HISTORY` backwards (`history`, a buffer of the attention module). With no
  history yet (the first step), 448 over a bound that holds by Cauchy-Schwarz, |dO_i . V_j| <= max_i |dO_i|
  max_j |V_j| (rows over the head dimension) and |rowsum(dO_i * O_i)| <= the same (O_i averages rows of
  V), so |dS| <= 2 max|dO_i| max|V_j| (`_gradient_bounds`): nothing saturates, at the price of resolution
  at the small end where the bound is loose.
- O comes out in e4m3 (cuDNN's FP8 forward writes bf16 or fp16 on Blackwell only) with V's scale: each O_i
  averages rows of V, so max |O| <= max |V|; it is dequantized to bf16 for the model and kept as codes for
  the backward. The gradients dQ, dK, dV come out in bf16 where this cuDNN's backward writes it, else fp16,
  else e4m3 scaled by bounds (`_gradient_bounds`); `fp8_attention_fault` picks the first that runs right.

Packed rows (`cu_seqlens`): cuDNN's ragged (THD) FP8 backward needs cuDNN newer than 9.21 (the frontend's own
tests skip it before), newer than torch 2.11's 9.19. So a packed row runs as a batch of its sequences, each
padded at its end with zeros to the longest (rounded up to 128, so few graphs are built): exact, since under
the causal mask no real query sees a key after it, and a padded query's output is dropped (its gradient is
zero, so it adds nothing to dK or dV). The cost is the padding's attention work.

`fp8_attention_fault(device)` says why the backend cannot be used ("" when it can): the package must import on
an NVIDIA GPU of compute capability 9 or 10 and match float32 attention on a small grouped-query case, plain
and packed, forward and gradients.
"""

from __future__ import annotations

import functools

import torch

from training.common import cudnn_graphs
from training.common.backends import importable
from training.fp8.casts import E4M3_MAX, amax_of, cast, scale_of

ROUND = 128  # a packed row's padded length is a multiple of this (fewer graph shapes)
AMAX_HISTORY = 4  # backwards whose amaxes set the delayed scales (the configs' FP8 amax history)
GRADIENTS = ("dP", "dQ", "dK", "dV")  # the rows of a history: the backward's quantized outputs


def new_history(device) -> torch.Tensor:
    """An empty amax history (no backward yet: the bounds set the first scales)."""
    return torch.zeros(len(GRADIENTS), AMAX_HISTORY, device=device)


def _bshd(b: int, s: int, h: int, d: int) -> tuple[tuple, tuple]:
    """cuDNN's (b, h, s, d) dims with the strides of our contiguous (b, s, h, d) tensors."""
    return (b, h, s, d), (s * h * d, d, h * d, 1)


FWD_IN = ("q", "k", "v", "descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
BWD_IN = tuple(
    "q k v o dO stats descale_q descale_k descale_v descale_o descale_dO descale_s descale_dP scale_s "
    "scale_dQ scale_dK scale_dV scale_dP".split()
)


@functools.lru_cache(maxsize=64)
def _graphs(b: int, s: int, hq: int, hk: int, d: int, grad_dtype: torch.dtype, device_index: int):
    """The forward and backward graphs of one shape (built and planned once), each with its {name: tensor}: O
    in e4m3 (Hopper's FP8 forward writes FP8 only), the gradients in `grad_dtype`."""
    cudnn = cudnn_graphs.cudnn()
    fp8, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    gtype = {torch.bfloat16: cudnn.data_type.BFLOAT16, torch.float16: cudnn.data_type.HALF}.get(
        grad_dtype, fp8
    )
    handle = cudnn_graphs.handle(device_index)
    built = []
    for backward in (False, True):
        g = cudnn.pygraph(io_data_type=fp8, intermediate_data_type=f32, compute_data_type=f32, handle=handle)
        t = {}
        for name, heads in (("q", hq), ("k", hk), ("v", hk)):
            dim, stride = _bshd(b, s, heads, d)
            t[name] = g.tensor(name=name, dim=dim, stride=stride, data_type=fp8)
        names = BWD_IN[6:] if backward else FWD_IN[3:]
        t.update({n: cudnn_graphs.scalar(g, n) for n in names})
        dim, stride = _bshd(b, s, hq, d)
        if not backward:
            o, stats, amax_s, amax_o = g.sdpa_fp8(
                **{n: t[n] for n in FWD_IN}, generate_stats=True, attn_scale=d**-0.5, use_causal_mask=True
            )
            o.set_output(True).set_dim(dim).set_stride(stride).set_data_type(fp8)
            stats.set_output(True).set_dim((b, hq, s, 1)).set_stride((hq * s, s, 1, 1)).set_data_type(f32)
            outs = {"o": o, "stats": stats, "amax_s": amax_s, "amax_o": amax_o}
        else:
            t["o"] = g.tensor(name="o", dim=dim, stride=stride, data_type=fp8)
            t["dO"] = g.tensor(name="dO", dim=dim, stride=stride, data_type=fp8)
            t["stats"] = g.tensor(name="stats", dim=(b, hq, s, 1), stride=(hq * s, s, 1, 1), data_type=f32)
            dq, dk, dv, *amaxes = g.sdpa_fp8_backward(
                **{n: t[n] for n in BWD_IN}, attn_scale=d**-0.5, use_causal_mask=True
            )
            for grad, heads in ((dq, hq), (dk, hk), (dv, hk)):
                gdim, gstride = _bshd(b, s, heads, d)
                grad.set_output(True).set_dim(gdim).set_stride(gstride).set_data_type(gtype)
            outs = {"dq": dq, "dk": dk, "dv": dv}
            outs.update({f"amax{i}": a for i, a in enumerate(amaxes)})
        for name, a in outs.items():
            if name.startswith("amax"):
                a.set_output(True).set_dim((1, 1, 1, 1)).set_stride((1, 1, 1, 1)).set_data_type(f32)
        cudnn_graphs.plan(g)
        built.append((g, {**t, **outs}))
    return built


def _quantize(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(t as contiguous e4m3 codes scaled by its own max |t|, the inverse scale as a (1, 1, 1, 1) tensor)."""
    scale = scale_of(amax_of(t), E4M3_MAX)
    return cast(t.contiguous(), scale, torch.float8_e4m3fn), scale.reciprocal().reshape(1, 1, 1, 1)


def _max_row_norm(t: torch.Tensor) -> torch.Tensor:
    return t.float().norm(dim=-1).amax()


def _one(device) -> torch.Tensor:
    return torch.ones(1, 1, 1, 1, device=device)


@torch.library.custom_op("mlperf_llama::cudnn_fp8_attention_fwd", mutates_args=())
def fp8_fwd(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, history: torch.Tensor, grad_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(O in bf16, the softmax stats, Q, K, V and O as e4m3, the inverse scales of Q, K, V (3,)) of causal
    attention over contiguous (b, s, heads, d) bf16 tensors; all but O are for the backward. O is written
    in e4m3 with V's scale: each O_i averages rows of V, so max |O| <= max |V| and nothing saturates.
    `history`: the layer's amax history, read and updated by the backward only."""
    (b, s, hq, d), hk = q.shape, k.shape[2]
    (q8, qi), (k8, ki), (v8, vi) = (_quantize(t) for t in (q, k, v))
    graph, tensors = _graphs(b, s, hq, hk, d, grad_dtype, q.device.index or 0)[0]
    o8 = torch.empty(b, s, hq, d, dtype=torch.float8_e4m3fn, device=q.device)
    stats = torch.empty(b, hq, s, 1, dtype=torch.float32, device=q.device)
    scratch = [torch.empty(1, 1, 1, 1, device=q.device) for _ in range(2)]
    one = _one(q.device)
    cudnn_graphs.execute(
        graph,
        tensors,
        {
            "q": q8,
            "k": k8,
            "v": v8,
            "descale_q": qi,
            "descale_k": ki,
            "descale_v": vi,
            "descale_s": one / E4M3_MAX,
            "scale_s": one * E4M3_MAX,
            "scale_o": vi.reciprocal(),
            "o": o8,
            "stats": stats,
            "amax_s": scratch[0],
            "amax_o": scratch[1],
        },
        q.device,
    )
    out = (o8.float() * vi.reshape(())).to(q.dtype)
    return out, stats, q8, k8, v8, o8, torch.cat([qi, ki, vi]).reshape(3)


@fp8_fwd.register_fake
def _(q, k, v, history, grad_dtype):
    (b, s, hq, _), f32 = q.shape, torch.float32
    codes = [torch.empty_like(t, dtype=torch.float8_e4m3fn) for t in (q, k, v, q)]
    return torch.empty_like(q), q.new_empty((b, hq, s, 1), dtype=f32), *codes, q.new_empty(3, dtype=f32)


def _gradient_bounds(dout, q8, v8, inverses) -> tuple[torch.Tensor, torch.Tensor]:
    """(a bound on |dS|, and bounds on |dQ|, |dK|, |dV| (3,)): |dS| = |P (dP - D)| <= 2B, B the module
    docstring's Cauchy-Schwarz bound; a query's row of P sums to 1, so |dQ| <= d^-0.5 2B max |K|; a key's
    column of P sums to at most the sequence's length s, so |dK| <= d^-0.5 s 2B max |Q| and
    |dV| <= s max |dO|."""
    s, d = q8.shape[1], q8.shape[-1]
    q_max, k_max = E4M3_MAX * inverses[0], E4M3_MAX * inverses[1]
    ds = (2 * _max_row_norm(dout) * _max_row_norm(v8) * inverses[2]).clamp(min=1e-30)
    grads = torch.stack([d**-0.5 * ds * k_max, d**-0.5 * s * ds * q_max, s * dout.float().abs().amax()])
    return ds, grads.clamp(min=1e-30)


@torch.library.custom_op("mlperf_llama::cudnn_fp8_attention_bwd", mutates_args=("history",))
def fp8_bwd(
    dout: torch.Tensor,
    q8: torch.Tensor,
    k8: torch.Tensor,
    v8: torch.Tensor,
    o8: torch.Tensor,
    stats: torch.Tensor,
    inverses: torch.Tensor,
    history: torch.Tensor,
    grad_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV (bf16) of `fp8_fwd` from the gradient of its output; computed in `grad_dtype` (e4m3: each
    by its delayed scale). dP's and the e4m3 gradients' scales come from `history` (their bounds while it is
    empty), and this backward's amaxes go into it."""
    (b, s, hq, d), hk = q8.shape, k8.shape[2]
    do8, doi = _quantize(dout)
    graph, tensors = _graphs(b, s, hq, hk, d, grad_dtype, q8.device.index or 0)[1]
    ds_bound, bounds = _gradient_bounds(dout, q8, v8, inverses)
    seen = history.amax(dim=1)
    chosen = torch.where(seen > 0, seen, torch.cat([ds_bound.reshape(1), bounds]))
    ds = chosen[0]
    fp8_grads = grad_dtype == torch.float8_e4m3fn
    scales = E4M3_MAX / chosen[1:] if fp8_grads else torch.ones(3, device=q8.device)
    grads = [torch.empty(t.shape, dtype=grad_dtype, device=q8.device) for t in (q8, k8, v8)]
    one = _one(q8.device)
    qi, ki, vi = (inverses[i].reshape(1, 1, 1, 1) for i in range(3))
    ds = ds.reshape(1, 1, 1, 1)
    data = {
        "q": q8,
        "k": k8,
        "v": v8,
        "o": o8,
        "dO": do8,
        "stats": stats,
        "descale_q": qi,
        "descale_k": ki,
        "descale_v": vi,
        "descale_o": vi,
        "descale_dO": doi,
        "descale_s": one / E4M3_MAX,
        "descale_dP": ds / E4M3_MAX,
        "scale_s": one * E4M3_MAX,
        "scale_dP": E4M3_MAX / ds,
        "scale_dQ": scales[0].reshape(1, 1, 1, 1),
        "scale_dK": scales[1].reshape(1, 1, 1, 1),
        "scale_dV": scales[2].reshape(1, 1, 1, 1),
        "dq": grads[0],
        "dk": grads[1],
        "dv": grads[2],
    }
    amaxes = torch.zeros(4, device=q8.device)  # the backward's order: dQ, dK, dV, dP
    data.update({f"amax{i}": amaxes[i : i + 1].view(1, 1, 1, 1) for i in range(4)})
    cudnn_graphs.execute(graph, tensors, data, q8.device)
    latest = amaxes[[3, 0, 1, 2]] if fp8_grads else torch.cat([amaxes[3:], seen[1:]])
    history.copy_(torch.cat([latest[:, None], history[:, :-1]], dim=1))
    if not fp8_grads:
        return tuple(g.to(dout.dtype) for g in grads)
    return tuple((g.float() / scales[i]).to(dout.dtype) for i, g in enumerate(grads))


@fp8_bwd.register_fake
def _(dout, q8, k8, v8, o8, stats, inverses, history, grad_dtype):
    return tuple(torch.empty_like(t, dtype=dout.dtype) for t in (q8, k8, v8))


def _setup(ctx, inputs, output):
    _, stats, q8, k8, v8, o8, inverses = output
    ctx.save_for_backward(q8, k8, v8, o8, stats, inverses)
    ctx.history, ctx.grad_dtype = inputs[3], inputs[4]


def _backward(ctx, dout, *_):
    q8, k8, v8, o8, stats, inverses = ctx.saved_tensors
    dq, dk, dv = fp8_bwd(dout.contiguous(), q8, k8, v8, o8, stats, inverses, ctx.history, ctx.grad_dtype)
    return dq, dk, dv, None, None


fp8_fwd.register_autograd(_backward, setup_context=_setup)

# the dtypes cuDNN's FP8 backward may write the gradients in, in the order tried: bf16, fp16, else e4m3 scaled
# by a bound (`_gradient_bounds`)
GRAD_DTYPES = (torch.bfloat16, torch.float16, torch.float8_e4m3fn)


def fp8_attention(
    q, k, v, cu_seqlens=None, max_seqlen=None, history=None, grad_dtype: torch.dtype | None = None
):
    """Causal attention over (batch, seq, heads, head_dim) bf16 tensors in FP8 (k, v may have fewer heads);
    with int32 `cu_seqlens` (the sequences packed in a batch-1 row), attention stays inside each sequence.
    `history`: the layer's amax history (`new_history`), kept from step to step; None: a new one (the first
    step's bounds every time)."""
    grad_dtype = grad_dtype or gradient_dtype(q.device)
    history = new_history(q.device) if history is None else history
    if cu_seqlens is None or cu_seqlens.numel() == 2:
        q, k, v = (t.contiguous() for t in (q, k, v))
        return fp8_fwd(q, k, v, history, grad_dtype)[0]
    return as_batch(q, k, v, cu_seqlens, lambda *padded: fp8_fwd(*padded, history, grad_dtype)[0])


def as_batch(q, k, v, cu_seqlens: torch.Tensor, causal):
    """`causal` attention (over (batch, seq, heads, head_dim)) of the sequences packed in a batch-1 row, run
    as a batch of those sequences padded at their ends with zeros (`padded_index`)."""
    index, keep = padded_index(cu_seqlens, q.shape[1])
    padded = [torch.cat([t[0], t.new_zeros(1, *t.shape[2:])])[index] for t in (q, k, v)]  # the zero row last
    return causal(*padded)[keep].unsqueeze(0)


def padded_index(cu_seqlens: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For the sequences packed in a row of `total` tokens (boundaries `cu_seqlens`), the (sequences, length)
    index of each padded position into the row (`total`, one past its end, for padding) and where the real
    tokens are; the length is the longest sequence rounded up to `ROUND`."""
    bounds = cu_seqlens.to(device="cpu", dtype=torch.int64)
    starts, lengths = bounds[:-1], bounds.diff()
    length = -(-int(lengths.max()) // ROUND) * ROUND
    positions = torch.arange(length)
    keep = positions[None, :] < lengths[:, None]
    index = torch.where(keep, starts[:, None] + positions[None, :], total)
    return index.to(cu_seqlens.device), keep.to(cu_seqlens.device)


def reference(q, k, v, cu_seqlens=None):
    """The same attention in float32 through SDPA with an explicit mask: the check's reference."""
    from training.llama.flash4 import reference as masked

    return masked(q, k, v, cu_seqlens=cu_seqlens)


# each GEMM operand rounded to e4m3 (relative error <= 2^-4 each), a result from up to three rounded factors
# (dS from dP from dO and V, then dS.K): off by at most about 3 x 2^-4 relative, norm-wise
TOLERANCE = 3 * 2**-4


def attention_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want||, in float32."""
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def compare(q, k, v, cu_seqlens, grad_dtype, generator) -> dict[str, float]:
    """The relative errors of the FP8 output and gradients (bf16 copies of q, k, v) against float32
    attention, in the steady state: the second of two steps on the same tensors, the first having filled
    the amax history that sets the delayed scales."""
    slow_in = [t.detach().float().requires_grad_() for t in (q, k, v)]
    want = reference(*slow_in, cu_seqlens=cu_seqlens)
    g = torch.randn(want.shape, device=want.device, generator=generator)
    history = new_history(q.device)
    for _ in range(2):
        fast_in = [t.detach().bfloat16().requires_grad_() for t in (q, k, v)]
        got = fp8_attention(*fast_in, cu_seqlens=cu_seqlens, history=history, grad_dtype=grad_dtype)
        (got.float() * g).sum().backward()
    (want * g).sum().backward()
    errors = {"output": attention_error(got, want)}
    errors.update({f"d{n}": attention_error(a.grad, b.grad) for n, a, b in zip("qkv", fast_in, slow_in)})
    return errors


# the gradients' dtype `fp8_attention_fault` found working, by GPU index: a plain dict, read inside compiled
# blocks without running the check there
FOUND: dict[int, torch.dtype] = {}


@functools.cache
def _choice(device: torch.device) -> tuple[torch.dtype | None, str]:
    """(the gradients' dtype cuDNN's FP8 attention runs right with here, or None; why not)."""
    if device.type != "cuda" or not torch.version.cuda:
        return None, "not an NVIDIA GPU"
    if not importable("cudnn"):
        return None, "nvidia-cudnn-frontend is not installed"
    if torch.cuda.get_device_capability(device)[0] not in (9, 10):
        capability = torch.cuda.get_device_capability(device)
        return None, f"compute capability {capability} (cuDNN's FP8 SDPA: 9.x, 10.x)"
    faults = []
    for grad_dtype in GRAD_DTYPES:
        try:
            generator = torch.Generator(device=device).manual_seed(0)
            shapes = [(1, 384, 4, 128), (1, 384, 2, 128), (1, 384, 2, 128)]  # the models' head size, GQA
            exact = [torch.randn(s, device=device, generator=generator) for s in shapes]
            cu = torch.tensor([0, 100, 384], dtype=torch.int32, device=device)
            for case, packed in (("causal", None), ("packed", cu)):
                errors = compare(*exact, packed, grad_dtype, generator)
                worst = max(errors, key=errors.get)
                if not errors[worst] <= TOLERANCE:
                    raise ValueError(
                        f"{case}: its {worst} is off float32 attention by {errors[worst]:.3g} "
                        f"(relative, > {TOLERANCE:.3g})"
                    )
            FOUND[device.index or 0] = grad_dtype
            return grad_dtype, ""
        except Exception as err:  # noqa: BLE001 - any failure means: do not use it
            text = str(err).splitlines()[0][:200] if str(err) else ""
            faults.append(f"{str(grad_dtype).removeprefix('torch.')} gradients: {type(err).__name__}: {text}")
    return None, "; ".join(faults)


def fp8_attention_fault(device: torch.device) -> str:
    """Why cuDNN's FP8 attention cannot run here, or "" (see the module's docstring)."""
    return _choice(device)[1]


def gradient_dtype(device: torch.device) -> torch.dtype:
    """The gradients' dtype `fp8_attention_fault` found working on `device` (the build runs the check)."""
    if (device.index or 0) not in FOUND:
        raise RuntimeError(f"cuDNN's FP8 attention cannot run here: {fp8_attention_fault(device)}")
    return FOUND[device.index or 0]
