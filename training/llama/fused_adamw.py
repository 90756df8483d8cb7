"""AdamW with each parameter's update one Triton pass (GPUs with Triton; `optim.build_optimizer` picks it
where it matches torch's fused AdamW on the GPU at start, `adamw_fault`).

torch's fused AdamW (`_fused_adamw_`, multi-tensor chunks) moved the 8B's 28 bytes per parameter (read the
parameter, gradient and both moments, write back three) at 2.9 TB/s on an H200 (4.8 TB/s): 39 ms of a 646 ms
native FP8 step on 2 GPUs (`perf/RESULTS.md`). One program per 1,024 elements of one tensor, its grid as large
as the tensor, reads and writes the same bytes: 3.68 TB/s on an H200 where `copy_` of as many bytes reaches
4.28 (4,096 and 8 warps: 2.83; `perf/parts.py adamw-sweep`, 1.0e9 bf16-held parameters). Same update as
torch's (decoupled weight decay, bias correction; the gradient divided by `grad_scale` when the clip sets it,
`parallel.clip_grad_norm_`).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from training.fp8.gather import local_data

BLOCK, WARPS = 1024, 4


@triton.jit
def _adamw_kernel(
    p_ptr,
    g_ptr,
    m_ptr,
    v_ptr,
    scale_ptr,
    w_ptr,
    n,
    lr,
    beta1,
    beta2,
    eps,
    weight_decay,
    step_size,
    bc2_sqrt,
    SCALED: tl.constexpr,
    COPY: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    if SCALED:
        g = g / tl.load(scale_ptr)
    m = tl.load(m_ptr + offs, mask=mask)
    v = tl.load(v_ptr + offs, mask=mask)
    p = p * (1.0 - lr * weight_decay)
    m = m + (1.0 - beta1) * (g - m)  # torch: exp_avg.lerp_(grad, 1 - beta1)
    v = v * beta2 + (1.0 - beta2) * g * g
    p = p - step_size * m / (tl.sqrt(v) / bc2_sqrt + eps)
    tl.store(p_ptr + offs, p, mask=mask)
    tl.store(m_ptr + offs, m, mask=mask)
    tl.store(v_ptr + offs, v, mask=mask)
    if COPY:  # the bf16 weights the forward reads (`hold_bf16`)
        tl.store(w_ptr + offs, p.to(w_ptr.dtype.element_ty), mask=mask)


class TritonAdamW(torch.optim.Optimizer):
    """torch.optim.AdamW's update for float32 parameters on a GPU, one Triton launch per parameter. Like
    torch's fused AdamW (`defaults["fused"]`) it takes the clip's coefficient as `grad_scale`. Parameters
    handed to `hold_bf16` become bf16 (the forward and backward use them as they are) and their float32
    values move into the optimizer's state as master weights, which each update writes back in both."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)
        super().__init__(params, defaults)
        self.grad_scale: torch.Tensor | None = None

    @torch.no_grad()
    def hold_bf16(self, params: list[torch.nn.Parameter]) -> int:
        """Keep `params` (float32 plain tensors, not DTensors, of this optimizer's groups) in bf16 for
        compute, their float32 values as master weights here: on one GPU the forward then casts no weights
        (autocast casts every matrix each forward, 6 bytes a parameter) and the gradients stay bf16 (no cast
        to float32 in the backward, 6 bytes more, and half the bytes for the clip's norm and AdamW to read).
        The bf16 weights are the master's round-to-nearest-even, as autocast's, and a bf16 gradient is the
        value autocast's cast makes float32 exactly: the update is the same. Gradients must not accumulate
        over several backwards (they would add in bf16). Returns the parameters' count."""
        mine = {id(p) for group in self.param_groups for p in group["params"]}
        count = 0
        for p in params:
            plain = local_data(p) is p  # (not a DTensor)
            if id(p) not in mine or not plain or p.dtype != torch.float32 or p.grad is not None:
                raise ValueError(
                    f"hold_bf16 takes this optimizer's float32 parameters without gradients "
                    f"(got {p.dtype} {tuple(p.shape)})"
                )
            self.state[p]["master"] = p.detach().clone()
            p.data = p.data.to(torch.bfloat16)
            count += p.numel()
        return count

    @torch.no_grad()
    def step(self, closure=None):
        scale = self.grad_scale
        for group in self.param_groups:
            (beta1, beta2), lr = group["betas"], group["lr"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                weights, grad = local_data(p), local_data(p.grad)
                param = state.get("master", weights)
                if param.dtype != torch.float32 or not (param.is_contiguous() and grad.is_contiguous()):
                    raise ValueError(
                        f"TritonAdamW takes contiguous float32 parameters and gradients, not {param.dtype} "
                        f"{tuple(param.shape)} (contiguous: {param.is_contiguous()}, {grad.is_contiguous()})"
                    )
                if "step" not in state:  # (a parameter's kind does not change: checked once)
                    for t in (weights, grad):  # a kernel handed a wrapper reads address 0: an illegal access
                        plain = type(t) in (torch.Tensor, torch.nn.Parameter) and t.data_ptr()
                        if t.numel() and not plain:
                            raise ValueError(
                                f"TritonAdamW takes plain tensors, not a {type(t).__name__} "
                                f"{tuple(t.shape)} (no storage of its own)"
                            )
                    state["step"] = 0
                    state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(param), torch.zeros_like(param)
                state["step"] += 1
                step = state["step"]
                n = param.numel()
                if n == 0:
                    continue
                _adamw_kernel[(triton.cdiv(n, BLOCK),)](
                    param,
                    grad,
                    state["exp_avg"],
                    state["exp_avg_sq"],
                    param if scale is None else scale,
                    weights,
                    n,
                    lr,
                    beta1,
                    beta2,
                    group["eps"],
                    group["weight_decay"],
                    lr / (1 - beta1**step),
                    math.sqrt(1 - beta2**step),
                    SCALED=scale is not None,
                    COPY=weights is not param,
                    BLOCK=BLOCK,
                    num_warps=WARPS,
                )


def adamw_fault(device: torch.device) -> str:
    """What `TritonAdamW` gets wrong on `device` against torch's fused AdamW ("" if nothing): parameters,
    after 3 steps of tensors of uneven sizes with weight decay and a `grad_scale` in the last step, within
    1e-5 relative to the largest; the first tensor held in bf16 (`hold_bf16`, bf16 gradients), whose bf16
    copy must be its master rounded."""
    gen = torch.Generator(device).manual_seed(0)
    shapes = [(1000, 37), (4096 + 5,), (3, 4096)]
    ours = [torch.randn(s, device=device, generator=gen) for s in shapes]
    ref = [p.clone() for p in ours]
    kwargs = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)
    optimizers = TritonAdamW(ours, **kwargs), torch.optim.AdamW(ref, fused=True, **kwargs)
    optimizers[0].hold_bf16(ours[:1])
    for step in range(3):
        grads = [torch.randn(s, device=device, generator=gen) for s in shapes]
        grads[0] = grads[0].bfloat16()
        for opt, params in zip(optimizers, (ours, ref)):
            for p, g in zip(params, grads):
                p.grad = g.to(p.dtype)
            opt.grad_scale = torch.tensor(2.0, device=device) if step == 2 else None
            opt.step()
    masters = [optimizers[0].state[ours[0]]["master"], *ours[1:]]
    for i, (a, b) in enumerate(zip(masters, ref)):
        if float((a - b).abs().max()) > 1e-5 * float(b.abs().max()):
            return f"the update of a {tuple(shapes[i])} parameter"
    if not torch.equal(ours[0], masters[0].bfloat16()):
        return "the bf16 copy of a master weight"
    return ""
