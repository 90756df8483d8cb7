"""Our own FP8 training path (`FP8_BACKEND=native`): a linear layer and a fused MLP computing in FP8 with
delayed scaling, e4m3 operands and e5m2 gradients (Transformer Engine's HYBRID recipe), their casts in Triton
on GPUs where they match PyTorch's (`casts`).

Kept as our own code, not Transformer Engine's or torchao's, for measured reasons (`perf/RESULTS.md`):
Transformer Engine cannot be installed where we test, and on H100/H200 this path trains Llama 3.1 8B 6-7%
faster than torchao's float8 and BERT faster than bf16, with the MLP fused (`FusedFp8MLP`) and weights
all-gathered in FP8 (`gather`).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, Partial, Shard

from training.fp8.casts import (
    E4M3_MAX,
    E5M2_MAX,
    act_backward_cast_transpose,
    act_cast_transpose,
    amax_of,
    cast,
    cast_transpose,
    pack_e4m3,
    scale_of,
)
from training.fp8.gather import unpack


def _cast_weight(w: torch.Tensor, given_scale: torch.Tensor | None, triton: bool):
    """w in e4m3 with the scale of its current amax: (copy, transposed copy, scale). A weight stored in FP8
    (`store_weights_in_fp8`; `given_scale`, its scale) is its own copy, and the transposed one is made in the
    backward (None here); one all-gathered in FP8 already holds both copies in its bytes (`gather.unpack`)."""
    if w.dtype == torch.float8_e4m3fn:
        return w, None, given_scale
    if given_scale is not None:
        return (*unpack(w), given_scale)
    scale = scale_of(amax_of(w), E4M3_MAX)
    return (*cast_transpose(w, scale, torch.float8_e4m3fn, triton=triton), scale)


def _scaled_mm(*args, **kwargs) -> torch.Tensor:
    """`torch._scaled_mm` outside autocast. On the CPU PyTorch emulates it: each operand in float32 times its
    scale, then a float32 matmul, which CPU autocast would run in bf16 (the scaled operands rounded to bf16
    first): other numbers than a run without autocast (FSDP2's, which computes in bf16 parameters) and than a
    GPU's single FP8 GEMM, which autocast leaves alone."""
    if not args[0].is_cpu:
        return torch._scaled_mm(*args, **kwargs)
    with torch.autocast("cpu", enabled=False):
        return torch._scaled_mm(*args, **kwargs)


def _kept(w8: torch.Tensor, w8t: torch.Tensor | None) -> torch.Tensor:
    """What a forward keeps of a weight for its backward: the transposed copy, or for a weight stored in FP8
    the weight itself (a reference, no memory), transposed when the backward needs it (`_transposed`)."""
    return w8 if w8t is None else w8t


def _transposed(kept: torch.Tensor, stored: bool) -> torch.Tensor:
    return kept.t().contiguous() if stored else kept


def _commit(pairs) -> None:
    """In a backward: each input amax recorded by its forward (`next`) becomes the one the next forward
    casts with (through its history, when it has one: `_fold`)."""
    for amax, recorded, history in pairs:
        amax.copy_(recorded)
        _fold(amax, history)


def _fold(amax: torch.Tensor, history: torch.Tensor | None) -> None:
    """With an amax history (FP8_AMAX_ALGO=max and FP8_AMAX_HISTORY > 1): `amax`, just recorded, enters the
    window of the last len(history) recorded amaxes, and becomes their maximum, the amax the next cast scales
    by (Transformer Engine's delayed scaling with amax_compute_algo "max"). Without one (None): nothing, the
    next cast scales by the most recent amax (TE's "most_recent", whatever the history's length)."""
    if history is None:
        return
    history.copy_(torch.roll(history, 1))
    history[0] = amax
    amax.copy_(history.max())


_CALIBRATING = False  # set by `calibrating()`: the linears compute in bf16 and record their amaxes


@contextlib.contextmanager
def calibrating():
    """Inside: every native FP8 linear (and fused MLP) computes in bf16 and records the amaxes its casts will
    use: its input's in the forward, the incoming gradient's in the backward (`_CalibrationMatmul`). Run a
    forward and backward inside it, eagerly (`training.fp8.calibrate`), so that the first real step casts
    with measured scales, not with scale 1, which flushes the small gradients of the first steps to zero."""
    global _CALIBRATING
    before, _CALIBRATING = _CALIBRATING, True
    try:
        yield
    finally:
        _CALIBRATING = before


class _CalibrationMatmul(torch.autograd.Function):
    """x @ w.T in bf16 with no weight gradient (calibration only), recording max |x| into both input amax
    buffers and, in the backward, max |incoming gradient| into `g_amax`: the amaxes a delayed-scaling step
    would have recorded had its casts been exact."""

    @staticmethod
    def forward(ctx, x, w, b, x_amax, x_amax_next, g_amax):
        amax = amax_of(x)
        x_amax.copy_(amax)
        x_amax_next.copy_(amax)
        ctx.save_for_backward(w)
        ctx.g_amax, ctx.x_dtype, ctx.b_dtype = g_amax, x.dtype, None if b is None else b.dtype
        bias = None if b is None else b.to(torch.bfloat16)
        return F.linear(x.to(torch.bfloat16), w, bias)

    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        ctx.g_amax.copy_(amax_of(g))
        db = g.sum(0, dtype=torch.float32).to(ctx.b_dtype) if ctx.needs_input_grad[2] else None
        return (g.to(torch.bfloat16) @ w).to(ctx.x_dtype), None, db, None, None, None


class _Fp8Matmul(torch.autograd.Function):
    """x @ w.T with both operands in e4m3 and the gradients in e5m2 (the HYBRID format). x is cast with the
    scale of the previous step's amax (delayed scaling: no pass over x before its cast), its amax recorded
    in the same pass into `x_amax_next` (`update_x_amax`, in training) and moved to `x_amax` by the backward
    (`_commit`): so a forward recomputed in the backward (activation checkpointing) casts as the first one
    did. w is cast with its current amax (a small tensor), the incoming gradient with the previous backward's
    amax, which the backward updates likewise. Each cast also writes the transposed copy that the backward's
    GEMMs need (the FP8 GEMM takes row-major x column-major operands): x's and the gradient's for the weight
    gradient (none for a frozen weight), w's for the input gradient. `fast_accum`: the forward GEMM
    accumulates in the tensor cores' own precision (cuBLASLt's fast accumulation), the gradients' GEMMs
    with their partial sums promoted to float32 (Transformer Engine's fprop and dgrad / wgrad settings)."""

    @staticmethod
    def forward(
        ctx,
        x,
        w,
        b,
        x_amax,
        x_amax_next,
        g_amax,
        update_x_amax,
        w_gathered_scale,
        triton,
        x_hist=None,
        g_hist=None,
        fast_accum=False,
    ):
        x_scale = scale_of(x_amax, E4M3_MAX)
        x8, x8t = cast_transpose(
            x,
            x_scale,
            torch.float8_e4m3fn,
            x_amax_next if update_x_amax else None,
            True,
            triton,
            transpose=ctx.needs_input_grad[1],
        )
        w8, w8t, w_scale = _cast_weight(w, w_gathered_scale, triton)
        bias = None if b is None else b.to(torch.bfloat16)  # added in the GEMM's epilogue
        out = torch.bfloat16
        y = _scaled_mm(
            x8,
            w8.t(),
            x_scale.reciprocal(),
            w_scale.reciprocal(),
            bias,
            out_dtype=out,
            use_fast_accum=fast_accum,
        )
        # a frozen weight (LoRA's base) needs no weight gradient: no transposed copies of x or of the
        # gradient (for the weight gradient's GEMM only) are written
        ctx.save_for_backward(x8t, _kept(w8, w8t), x_scale, w_scale)
        ctx.stored = w8t is None
        # not saved for backward: that would check its version, which another micro-batch's backward may
        # change in between (a pipeline's 1F1B order runs two forwards before their backwards)
        ctx.g_amax, ctx.commit = g_amax, [(x_amax, x_amax_next, x_hist)] if update_x_amax else []
        ctx.g_hist = g_hist
        ctx.dtypes, ctx.triton = (x.dtype, w.dtype, None if b is None else b.dtype), triton
        return y

    @staticmethod
    def backward(ctx, g):
        (x8t, w8t, x_scale, w_scale), g_amax = ctx.saved_tensors, ctx.g_amax
        w8t = _transposed(w8t, ctx.stored)
        g_scale = scale_of(g_amax, E5M2_MAX)
        g8, g8t = cast_transpose(
            g, g_scale, torch.float8_e5m2, g_amax, triton=ctx.triton, transpose=ctx.needs_input_grad[1]
        )
        _fold(g_amax, ctx.g_hist)
        g_inv = g_scale.reciprocal()
        dx = _scaled_mm(g8, w8t.t(), g_inv, w_scale.reciprocal(), out_dtype=ctx.dtypes[0])
        dw = db = None
        if ctx.needs_input_grad[1]:
            dw = _scaled_mm(g8t, x8t.t(), g_inv, x_scale.reciprocal(), out_dtype=ctx.dtypes[1])
        if ctx.needs_input_grad[2]:
            db = g.sum(0, dtype=torch.float32).to(ctx.dtypes[2])
        _commit(ctx.commit)
        return dx, dw, db, *[None] * 9


class _Fp8MLP(torch.autograd.Function):
    """An MLP with its projections in FP8 as `_Fp8Matmul`'s: down(silu(gate(x)) * up(x)) (Llama's SwiGLU, no
    biases) or, without gate, down(gelu(up(x))) (BERT's FFN, biases in the GEMMs' epilogues), with fewer
    passes over memory than one `Fp8Linear` after another. x is cast once for gate and up. The activation's
    output is written only in FP8, for down (one kernel, not the activation then the cast); in the backward,
    its input gradients likewise, for the up projections' GEMMs (with GELU, the up bias's gradient summed in
    the same pass). The same numbers as the `Fp8Linear`s (bit for bit in PyTorch; on GPUs up to where
    Triton's exp and erf differ from CUDA's). Amax buffers: x's and h's (the inputs of up and of down;
    recorded with `update_amax` into x_amax_next and h_amax_next, moved by the backward as `_Fp8Matmul`'s),
    and the gradients' of y, up and gate (updated by the backward). `w*_gathered`: the scales of weights
    all-gathered in FP8, or None. `*_hist`: the amax histories of the same five (`_fold`), or None.
    `save_fp8` (SwiGLU): the activation's inputs, the gate and up projections' outputs, are kept for the
    backward as e4m3 codes scaled by their own amax (`pack_e4m3`), not in bf16: half the memory of what the
    MLP keeps, the backward computed from their e4m3-rounded values. `fast_accum`: the forward GEMMs
    accumulate as `_Fp8Matmul`'s do with it."""

    @staticmethod
    def forward(
        ctx,
        x,
        w_up,
        b_up,
        w_gate,
        w_down,
        b_down,
        x_amax,
        x_amax_next,
        h_amax,
        h_amax_next,
        dy_amax,
        dup_amax,
        dgate_amax,
        update_amax,
        wu_gathered,
        wg_gathered,
        wd_gathered,
        triton,
        x_hist=None,
        h_hist=None,
        dy_hist=None,
        dup_hist=None,
        dgate_hist=None,
        save_fp8=False,
        fast_accum=False,
    ):
        x_scale, h_scale = scale_of(x_amax, E4M3_MAX), scale_of(h_amax, E4M3_MAX)
        # frozen weights (LoRA's base) need no weight gradients: no transposed copies are written for them
        needs = ctx.needs_input_grad  # (x, w_up, b_up, w_gate, w_down, ...)
        x8, x8t = cast_transpose(
            x,
            x_scale,
            torch.float8_e4m3fn,
            x_amax_next if update_amax else None,
            True,
            triton,
            transpose=needs[1] or needs[3],
        )
        x_inv, bf16 = x_scale.reciprocal(), torch.bfloat16
        wu8, wu8t, u_scale = _cast_weight(w_up, wu_gathered, triton)
        wd8, wd8t, d_scale = _cast_weight(w_down, wd_gathered, triton)
        bias_up, bias_down = (None if b is None else b.to(bf16) for b in (b_up, b_down))
        fast = {"out_dtype": bf16, "use_fast_accum": fast_accum}
        up = _scaled_mm(x8, wu8.t(), x_inv, u_scale.reciprocal(), bias_up, **fast)
        gate = wg8 = wg8t = g_scale = None
        if w_gate is not None:
            wg8, wg8t, g_scale = _cast_weight(w_gate, wg_gathered, triton)
            gate = _scaled_mm(x8, wg8.t(), x_inv, g_scale.reciprocal(), **fast)
        h8, h8t = act_cast_transpose(
            up, gate, h_scale, h_amax_next if update_amax else None, triton, transpose=needs[4]
        )
        y = _scaled_mm(h8, wd8.t(), h_scale.reciprocal(), d_scale.reciprocal(), bias_down, **fast)
        h8t = h8t if needs[4] else None  # (GELU's kernel writes it always)
        kept = _kept(wu8, wu8t), None if w_gate is None else _kept(wg8, wg8t), _kept(wd8, wd8t)
        ctx.stored = wu8t is None, wg8t is None, wd8t is None
        packed = save_fp8 and gate is not None
        (up, up_s), (gate, gate_s) = (pack_e4m3(t, triton) if packed else (t, None) for t in (up, gate))
        ctx.save_for_backward(
            x8t, up, gate, h8t, *kept, x_scale, h_scale, u_scale, g_scale, d_scale, up_s, gate_s
        )
        ctx.g_amax, ctx.triton = (dy_amax, dup_amax, dgate_amax), triton  # not saved: see _Fp8Matmul
        ctx.g_hist = (dy_hist, dup_hist, dgate_hist)
        ctx.commit = [(x_amax, x_amax_next, x_hist), (h_amax, h_amax_next, h_hist)] if update_amax else []
        ctx.dtypes = (
            x.dtype,
            w_up.dtype,
            None if b_up is None else b_up.dtype,
            None if b_down is None else b_down.dtype,
        )
        return y

    @staticmethod
    def backward(ctx, dy):
        x8t, up, gate, h8t, wu8t, wg8t, wd8t, x_scale, h_scale, u_scale, g_scale, d_scale, *packed = (
            ctx.saved_tensors
        )
        wu8t, wd8t = _transposed(wu8t, ctx.stored[0]), _transposed(wd8t, ctx.stored[2])
        wg8t = None if wg8t is None else _transposed(wg8t, ctx.stored[1])
        (dy_amax, dup_amax, dgate_amax), (x_dtype, w_dtype, bu_dtype, bd_dtype) = ctx.g_amax, ctx.dtypes
        dy_scale, dup_scale = scale_of(dy_amax, E5M2_MAX), scale_of(dup_amax, E5M2_MAX)
        dgate_scale = None if gate is None else scale_of(dgate_amax, E5M2_MAX)
        needs = ctx.needs_input_grad  # (x, w_up, b_up, w_gate, w_down, b_down, ...)
        dy8, dy8t = cast_transpose(
            dy, dy_scale, torch.float8_e5m2, dy_amax, triton=ctx.triton, transpose=needs[4]
        )
        dy_hist, dup_hist, dgate_hist = ctx.g_hist
        _fold(dy_amax, dy_hist)
        dy_inv, x_inv = dy_scale.reciprocal(), x_scale.reciprocal()
        dh = _scaled_mm(dy8, wd8t.t(), dy_inv, d_scale.reciprocal(), out_dtype=torch.bfloat16)
        dw_down = dw_up = dw_gate = db_up = db_down = None
        if needs[4]:
            dw_down = _scaled_mm(dy8t, h8t.t(), dy_inv, h_scale.reciprocal(), out_dtype=w_dtype)
        if needs[5]:
            db_down = dy.sum(0, dtype=torch.float32).to(bd_dtype)
        scales, amaxes = (dup_scale, dgate_scale), (dup_amax, dgate_amax)
        inverses = None if packed[0] is None else packed  # (`save_fp8`: up and gate as e4m3 codes)
        dup8, dup8t, *rest = act_backward_cast_transpose(
            dh, up, gate, *scales, *amaxes, ctx.triton, transpose=needs[1] or needs[3], inverses=inverses
        )
        _fold(dup_amax, dup_hist)
        if gate is not None:
            _fold(dgate_amax, dgate_hist)
        dup_inv = dup_scale.reciprocal()
        dx = _scaled_mm(dup8, wu8t.t(), dup_inv, u_scale.reciprocal(), out_dtype=x_dtype)
        if needs[1]:
            dw_up = _scaled_mm(dup8t, x8t.t(), dup_inv, x_inv, out_dtype=w_dtype)
        if gate is None:
            db_up = rest[0].to(bu_dtype) if needs[2] else None
        else:
            (dg8, dg8t), dg_inv = rest, dgate_scale.reciprocal()
            dx = dx + _scaled_mm(dg8, wg8t.t(), dg_inv, g_scale.reciprocal(), out_dtype=x_dtype)
            if needs[3]:
                dw_gate = _scaled_mm(dg8t, x8t.t(), dg_inv, x_inv, out_dtype=w_dtype)
        _commit(ctx.commit)
        return dx, dw_up, db_up, dw_gate, dw_down, db_down, *[None] * 19


class Fp8Linear(nn.Linear):
    """nn.Linear (same parameters and names) computing in FP8 with delayed scaling (`_Fp8Matmul`); the amax
    buffers start at the formats' maxima, so the first step casts with scale 1, as Transformer Engine. A model
    built on the meta device calls `reset_amax` once materialized (`to_empty` leaves buffers unset). Under
    FSDP2 its weight may be all-gathered in FP8 (`gather.gather_weights_in_fp8`). `triton`: its casts run
    in Triton on GPU tensors (`casts.choose_casts`). `history` > 0: its input's and gradient's casts scale by
    the largest amax of the last `history` steps (`_fold`; buffers `x_amax_history`, `g_amax_history`), not
    by the most recent one. `fast_accum`: its forward GEMM with fast accumulation (`_Fp8Matmul`)."""

    gathers_fp8 = False  # its weight is an `_Fp8GatheredWeight`, scaled by the `w_scale` buffer
    fast_accum = False  # its forward GEMM with fast accumulation
    stores_fp8 = False  # its (frozen) weight is stored as e4m3 codes, scaled by the `w_scale` buffer

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, triton: bool = False, history: int = 0, fast_accum: bool = False
    ) -> Fp8Linear:
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        new.weight, new.bias, new.triton, new.fast_accum = linear.weight, linear.bias, triton, fast_accum
        device = linear.weight.device
        new.register_buffer("x_amax", torch.tensor(E4M3_MAX, device=device), persistent=False)
        new.register_buffer("x_amax_next", torch.tensor(E4M3_MAX, device=device), persistent=False)
        new.register_buffer("g_amax", torch.tensor(E5M2_MAX, device=device), persistent=False)
        for name in ("x_amax_history", "g_amax_history"):  # zeros: an amax is never below
            window = torch.zeros(history, device=device) if history > 0 else None
            new.register_buffer(name, window, persistent=False)
        new.calibrated = False  # the amaxes are the formats' maxima until `calibrate` measures them
        return new

    @torch.no_grad()
    def reset_amax(self) -> None:
        self.x_amax.fill_(E4M3_MAX)
        self.x_amax_next.fill_(E4M3_MAX)
        self.g_amax.fill_(E5M2_MAX)
        for history in (self.x_amax_history, self.g_amax_history):
            if history is not None:
                history.zero_()
        self.calibrated = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.weight, DTensor):
            return self._forward_tensor_parallel(x)
        return self._matmul(
            x,
            self.weight,
            self.bias,
            self.x_amax,
            self.x_amax_next,
            self.g_amax,
            self.x_amax_history,
            self.g_amax_history,
        )

    def gathered_scale(self) -> torch.Tensor | None:
        """The scale its weight was all-gathered or stored in FP8 with (None: a plain weight, cast here)."""
        return self.w_scale if self.gathers_fp8 or self.stores_fp8 else None

    @torch.no_grad()
    def store_in_fp8(self) -> None:
        """Replace the frozen weight by its e4m3 codes (half of bf16's memory, and no cast in any forward),
        scaled by its amax now (`w_scale`); the module computes the same numbers as before, as the weight
        would have been cast with that scale every step."""
        w = self.weight
        if w.requires_grad or isinstance(w, DTensor) or self.gathers_fp8:
            raise ValueError("only a frozen, unsharded weight can be stored in FP8 (a LoRA base on one GPU)")
        scale = scale_of(amax_of(w), E4M3_MAX)
        self.weight = nn.Parameter(cast(w, scale, torch.float8_e4m3fn), requires_grad=False)
        self.register_buffer("w_scale", scale, persistent=False)
        self.stores_fp8 = True

    def _matmul(self, x, w, b, x_amax, x_amax_next, g_amax, x_hist=None, g_hist=None):
        flat = x.reshape(-1, x.shape[-1])
        if _CALIBRATING:
            y = _CalibrationMatmul.apply(flat, self._bf16_weight(w), b, x_amax, x_amax_next, g_amax)
            return y.view(*x.shape[:-1], -1)
        # the amax follows training forwards only (not evaluation, nor other no-grad forwards)
        training = self.training and torch.is_grad_enabled()
        y = _Fp8Matmul.apply(
            flat,
            w,
            b,
            x_amax,
            x_amax_next,
            g_amax,
            training,
            self.gathered_scale(),
            self.triton,
            x_hist,
            g_hist,
            self.fast_accum,
        )
        return y.view(*x.shape[:-1], -1)

    @torch.no_grad()
    def _bf16_weight(self, w: torch.Tensor) -> torch.Tensor:
        """The weight the FP8 GEMM will multiply, in bf16 and detached (calibration computes no weight
        gradient): its e4m3 codes as the step casts them (or as stored, or all-gathered) over their scale."""
        w8, _, scale = _cast_weight(w.detach(), self.gathered_scale(), self.triton)
        return (w8.float() / scale).to(torch.bfloat16)

    def _forward_tensor_parallel(self, x):
        """Under DTensor tensor parallelism (the weight sharded by rows: column-parallel, with the input
        replicated; or by columns: row-parallel, with the input sharded the same way): the FP8 GEMM of the
        local shards, with this rank's own scales (each rank dequantizes its product before any sum, so the
        scales need not agree), DTensor only at the edges. The gradient of a replicated input is a partial
        sum per rank; DTensor all-reduces it."""
        w = self.weight
        if w.device_mesh.ndim != 1 or not w.placements[0].is_shard():
            raise NotImplementedError(f"native FP8 linear with a weight placed {w.placements}")
        row_parallel = w.placements[0].dim == 1
        if row_parallel and self.bias is not None:
            raise NotImplementedError(
                "native FP8 row-parallel linear with a bias (it would be added per rank)"
            )
        grad = [Shard(x.ndim - 1)] if row_parallel else [Partial()]
        b = None if self.bias is None else self.bias.to_local()
        # parallelize_module made the amax buffers replicated DTensors: each rank keeps its own values
        buffers = self.x_amax, self.x_amax_next, self.g_amax, self.x_amax_history, self.g_amax_history
        amax = [a.to_local() if isinstance(a, DTensor) else a for a in buffers]
        y = self._matmul(x.to_local(grad_placements=grad), w.to_local(), b, *amax)
        out = [Partial()] if row_parallel else [Shard(y.ndim - 1)]
        return DTensor.from_local(y, w.device_mesh, out, run_check=False)


class FusedFp8MLP(nn.Module):
    """An MLP whose projections are `Fp8Linear`s, run as one FP8 function (`_Fp8MLP`) instead of three
    linears: down(silu(gate(x)) * up(x)) with a gate (SwiGLU), else down(gelu(up(x))). Its children keep the
    names of the MLP it replaces (`apply_fp8` swaps it in for the module the benchmark names in `MlpLayout`),
    so parameter names, initialization and checkpoints are unchanged. Under tensor parallelism (DTensor
    weights) it runs the linears one by one. `saves_fp8` (SwiGLU; `save_mlp_activations_in_fp8`): it keeps
    the activation's inputs for the backward in e4m3 (`_Fp8MLP`'s `save_fp8`)."""

    saves_fp8 = False

    def __init__(self, up: str, down: str, gate: str | None, linears: dict[str, Fp8Linear]):
        super().__init__()
        self.names = up, down, gate
        for name, linear in linears.items():
            setattr(self, name, linear)

    def parts(self) -> tuple[Fp8Linear, Fp8Linear, Fp8Linear | None]:
        up, down, gate = self.names
        return getattr(self, up), getattr(self, down), None if gate is None else getattr(self, gate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up, down, gate = self.parts()
        if isinstance(down.weight, DTensor) or _CALIBRATING:  # (each linear records its own amaxes)
            h = F.gelu(up(x)) if gate is None else F.silu(gate(x)) * up(x)
            return down(h)
        flat = x.reshape(-1, x.shape[-1])
        training = down.training and torch.is_grad_enabled()
        w_gate, dgate_amax = (None, None) if gate is None else (gate.weight, gate.g_amax)
        # gate's x_amax and x_amax_next, the same input as up's, stay unused
        dgate_hist = None if gate is None else gate.g_amax_history
        y = _Fp8MLP.apply(
            flat,
            up.weight,
            up.bias,
            w_gate,
            down.weight,
            down.bias,
            up.x_amax,
            up.x_amax_next,
            down.x_amax,
            down.x_amax_next,
            down.g_amax,
            up.g_amax,
            dgate_amax,
            training,
            up.gathered_scale(),
            None if gate is None else gate.gathered_scale(),
            down.gathered_scale(),
            down.triton,
            up.x_amax_history,
            down.x_amax_history,
            down.g_amax_history,
            up.g_amax_history,
            dgate_hist,
            self.saves_fp8 and training,
            down.fast_accum,
        )
        return y.view(*x.shape[:-1], -1)
