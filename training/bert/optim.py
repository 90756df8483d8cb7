"""LAMB as MLPerf's BERT uses it (apex FusedLAMB semantics), and the linear-warmup / poly-decay schedule.

One step: clip all gradients together to `max_grad_norm` (global norm), Adam moments with bias
correction, update = m_hat / (sqrt(v_hat) + eps) + weight_decay * p, then for parameters with weight decay
scale the update by the trust ratio ||p|| / ||update|| (1 where either norm is 0; apex's use_nvlamb=False).
Everything is done with multi-tensor `torch._foreach_*` ops over each group: no per-tensor Python loop and
no host synchronisation.
"""

from __future__ import annotations

import torch


class Lamb(torch.optim.Optimizer):
    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.01,
                 max_grad_norm: float = 1.0):  # fmt: skip
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, max_grad_norm=max_grad_norm)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        groups = [(g, [p for p in g["params"] if p.grad is not None]) for g in self.param_groups]
        grads = [p.grad for _, ps in groups for p in ps]
        if not grads:
            return None
        global_norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        clip = torch.clamp(global_norm / self.defaults["max_grad_norm"], min=1.0)  # grads are divided by it
        for group, params in groups:
            if not params:
                continue
            beta1, beta2 = group["betas"]
            group["step"] = group.get("step", 0) + 1
            bc1, bc2 = 1 - beta1 ** group["step"], 1 - beta2 ** group["step"]
            m, v = zip(*(self._moments(p) for p in params), strict=True)
            g = torch._foreach_div([p.grad for p in params], clip)
            torch._foreach_lerp_(m, g, 1 - beta1)
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, g, g, value=1 - beta2)
            denom = torch._foreach_sqrt(v)
            torch._foreach_div_(denom, bc2**0.5)
            torch._foreach_add_(denom, group["eps"])
            update = torch._foreach_div(m, denom)
            torch._foreach_div_(update, bc1)
            if group["weight_decay"]:
                torch._foreach_add_(update, params, alpha=group["weight_decay"])
                w_norm = torch.stack(torch._foreach_norm(params))
                u_norm = torch.stack(torch._foreach_norm(update))
                ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                torch._foreach_mul_(update, list(ratio.unbind()))
            torch._foreach_add_(params, update, alpha=-group["lr"])
        return None

    def _moments(self, p):
        state = self.state[p]
        if not state:
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state["exp_avg"], state["exp_avg_sq"]


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Biases and LayerNorm parameters get no weight decay (as in BERT)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        skip = name.endswith("bias") or "norm" in name.lower() or name == "mlm_bias"
        (no_decay if skip else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def poly_warmup_lr(step: int, base_lr: float, total_steps: int, warmup_steps: int, start_warmup_step: int = 0,
                   degree: float = 1.0, end_lr: float = 0.0) -> float:  # fmt: skip
    """LR for optimizer step `step` (0-based): linear warmup from `start_warmup_step` over `warmup_steps`,
    then polynomial decay to `end_lr` at `total_steps` (NVIDIA's LinearWarmupPolyDecayScheduler)."""
    since_warmup_start = step - start_warmup_step
    if since_warmup_start < warmup_steps:
        return base_lr * since_warmup_start / warmup_steps
    progress = min(step / total_steps, 1.0)
    return (base_lr - end_lr) * (1.0 - progress) ** degree + end_lr
