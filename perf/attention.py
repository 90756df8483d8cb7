"""Attention kernels on one GPU, forward + backward, for the two shapes our trainers run.

    python -m perf.attention [bert] [bert-plans] [llama] [lora] [mistral]

bert: 48 packed rows x 512 tokens, 16 heads of 64, rows of 1-3 sequences (2 on average) as in
bench_bert.py, BERT's attention dropout 0.1. Each way to keep sequences apart: SDPA with a block-diagonal
bool mask under each backend that accepts it, cuDNN's ragged kernel over the flattened rows with dropout
(ATTENTION=cudnn_ragged: `training.bert.cudnn_attention`, q, k, v read from the fused projection's output),
flex attention with a document mask, PyTorch's `varlen_attn` (neither has dropout), and ATen's flash and
memory-efficient varlen kernels with and without dropout (`_flash_attention_forward`: what
ATTENTION=torch_flash runs). Checked: each kernel against fp32 math
without dropout, and for the kernels with dropout that the backward drops what the forward dropped
(<out, g> = <v, dv>, since out = P v for the dropped probabilities P).
bert-plans: cudnn_ragged's forward and backward under each plan cuDNN offers (`bert_plans`).
llama: one 8192-token causal sequence, 32 query heads and 8 key/value heads of 128 (Llama 3.1 8B), under
SDPA's default choice, each backend forced, cuDNN with the key/value heads expanded, and FlashAttention-4
(`flash-attn-4`, our backend `flash4`) where it runs. lora: the same with Llama 2 70B's 64 / 8 heads.
mistral: the same sequence and heads with Mistral's 4096-token sliding window (`mistral()`).
Prints a table per part last: median ms (CUDA events) and TFLOP/s counting only useful work.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from perf.lib.bert_rows import ROWS, SEQ, packed_rows
from perf.lib.timing import table, timed
from training.bert import data
from training.bert.attention import block_diagonal_mask
from training.bert.cudnn_attention import cudnn_ragged_fault, ragged_attention


def bert() -> None:
    heads, dim, dev = 16, 64, torch.device("cuda")
    rows = packed_rows(np.random.default_rng(0), ROWS, 30522)
    b = data.collate(rows, SEQ).to(dev)
    padded_cu = data.pad_static(data.collate(rows, SEQ), ROWS).cu_seqlens.to(dev)
    lens = [int(n) for r in rows for n in r[4]]
    useful = 3 * 4 * heads * dim * sum(n * n for n in lens)  # fwd + bwd (= 2x fwd), QK^T and PV
    q, k, v = (
        torch.randn(ROWS, heads, SEQ, dim, device=dev, dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    mask = block_diagonal_mask(b.seq_ids)
    grad = torch.randn_like(q)
    results = []

    def step_of(fn, g=grad):
        return lambda: fn().backward(g)

    for backend in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        for p in (0.1, 0.0):

            def fn(backend=backend, p=p):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)

            timed(results, f"sdpa mask {backend.name.lower()} dropout {p}", step_of(fn), useful)
    timed(
        results,
        "sdpa no mask flash (crosses sequences: lower bound)",
        step_of(lambda: F.scaled_dot_product_attention(q, k, v)),
        useful,
    )

    flat = [t.detach().transpose(1, 2).reshape(ROWS * SEQ, heads, dim).requires_grad_() for t in (q, k, v)]
    gflat = grad.transpose(1, 2).reshape(ROWS * SEQ, heads, dim)
    fused = torch.stack([t.detach() for t in flat], dim=1).requires_grad_()  # the projection's (T, 3, h, d)
    fault = cudnn_ragged_fault()
    print(f"cudnn_ragged's own check: {fault or 'passed'}")
    for p in (0.1, 0.0) if fault is None else ():
        timed(
            results,
            f"cudnn ragged (cudnn_ragged) dropout {p}",
            step_of(lambda p=p: ragged_attention(fused, padded_cu, SEQ, p), gflat),
            useful,
        )
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    ids = b.seq_ids.int()
    block = create_block_mask(
        lambda b_, h, qi, ki: ids[b_, qi] == ids[b_, ki], ROWS, None, SEQ, SEQ, device=dev
    )
    flex = torch.compile(flex_attention)
    timed(
        results,
        "flex_attention doc mask (no dropout)",
        step_of(lambda: flex(q, k, v, block_mask=block)),
        useful,
    )
    from torch.nn.attention.varlen import varlen_attn

    cu = b.cu_seqlens
    timed(
        results,
        "torch varlen_attn (no dropout)",
        step_of(lambda: varlen_attn(*flat, cu, cu, SEQ, SEQ), gflat),
        useful,
    )

    def flash_varlen(p, cu=padded_cu):
        return torch.ops.aten._flash_attention_forward(*flat, cu, cu, SEQ, SEQ, p, False, False)[0]

    def efficient_varlen(p, cu=padded_cu):
        return torch.ops.aten._efficient_attention_forward(
            *(t.unsqueeze(0) for t in flat), None, cu, cu, SEQ, SEQ, p, 0, True
        )[0].squeeze(0)

    for p in (0.1, 0.0):
        timed(results, f"aten flash varlen dropout {p}", step_of(lambda p=p: flash_varlen(p), gflat), useful)
        timed(
            results,
            f"aten efficient varlen dropout {p}",
            step_of(lambda p=p: efficient_varlen(p), gflat),
            useful,
        )

    real = b.seq_ids.view(-1) > 0  # tokens of real sequences (padding outputs are never read)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
    ref = ref.transpose(1, 2).reshape(ROWS * SEQ, heads, dim)[real]

    def rel(out):
        return float((out.float()[real] - ref).norm() / ref.norm())

    with torch.no_grad():
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            print(
                f"sdpa {backend.name} vs fp32 math, no dropout: relative error "
                f"{rel(out.transpose(1, 2).reshape(ROWS * SEQ, heads, dim)):.2e}"
            )
        if fault is None:
            print(
                f"cudnn ragged vs fp32 math, no dropout: relative error "
                f"{rel(ragged_attention(fused, padded_cu, SEQ, 0.0)):.2e}"
            )
        print(f"aten flash varlen vs fp32 math, no dropout: relative error {rel(flash_varlen(0.0)):.2e}")
        print(f"aten efficient varlen vs fp32 math: relative error {rel(efficient_varlen(0.0)):.2e}")
    for name, fn in (("flash", flash_varlen), ("efficient", efficient_varlen)):
        for t in flat:
            t.grad = None
        out = fn(0.1)
        out.backward(gflat)
        lhs = float((out.detach().float() * gflat.float()).sum())
        rhs = float((flat[2].float() * flat[2].grad.float()).sum())
        print(
            f"aten {name} varlen, dropout 0.1: <out,g> {lhs:.4e} vs <v,dv> {rhs:.4e} "
            f"(relative {abs(lhs - rhs) / abs(rhs):.1e})"
        )
    if fault is None:
        fused.grad = None
        out = ragged_attention(fused, padded_cu, SEQ, 0.1)
        out.backward(gflat)
        lhs = float((out.detach().float() * gflat.float()).sum())
        rhs = float((fused[:, 2].detach().float() * fused.grad[:, 2].float()).sum())
        print(
            f"cudnn ragged, dropout 0.1: <out,g> {lhs:.4e} vs <v,dv> {rhs:.4e} "
            f"(relative {abs(lhs - rhs) / abs(rhs):.1e})"
        )
    table(
        f"BERT per layer, fwd+bwd, {ROWS}x{SEQ} tokens, {len(lens)} sequences; x24 layers per step", results
    )


def bert_plans() -> None:
    """cudnn_ragged's forward and backward under each execution plan cuDNN offers for them (the op runs the
    first that builds): the whole forward + backward timed with one graph's plan pinned at a time, the other
    graph's as built."""
    from training.bert import cudnn_attention

    heads, dim, dev = 16, 64, torch.device("cuda")
    rows = packed_rows(np.random.default_rng(0), ROWS, 30522)
    cu = data.pad_static(data.collate(rows, SEQ), ROWS).cu_seqlens.to(dev)
    lens = [int(n) for r in rows for n in r[4]]
    useful = 3 * 4 * heads * dim * sum(n * n for n in lens)
    fused = torch.randn(ROWS * SEQ, 3, heads, dim, device=dev, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(ROWS * SEQ, heads, dim, device=dev, dtype=torch.bfloat16)

    def step():
        fused.grad = None
        ragged_attention(fused, cu, SEQ, 0.1).backward(grad)

    step()
    results = []
    timed(results, "as built (each graph's first plan that builds)", step, useful)
    segments = cudnn_attention.padded_segments(cu.numel() - 1)
    built = cudnn_attention._graphs(segments, SEQ, heads, dim, ROWS * SEQ, 0.1, dev.index or 0)
    for which, (graph, _) in zip(("forward", "backward"), built):
        first = None  # the plan the op runs: the first that builds
        for index in range(graph.get_execution_plan_count()):
            name = graph.get_plan_name_at_index(index)
            try:
                graph.select_plan(index).build_plans()
            except Exception as err:  # noqa: BLE001 - a plan that does not build is a row too
                results.append((f"{which} plan {index} {name}", float("nan"), f"not built: {str(err)[:80]}"))
                continue
            first = index if first is None else first
            timed(results, f"{which} plan {index} {name}", step, useful)
        if first is not None:
            graph.select_plan(first).build_plans()
    table(f"cudnn_ragged per layer, fwd+bwd, {ROWS}x{SEQ} tokens, dropout 0.1, by cuDNN plan", results)


def llama(heads: int = 32, kv: int = 8, name: str = "Llama 3.1 8B") -> None:
    dev, seq, dim = torch.device("cuda"), 8192, 128
    q = torch.randn(1, heads, seq, dim, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k, v = (
        torch.randn(1, kv, seq, dim, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(2)
    )
    grad = torch.randn_like(q)
    useful = 6 * seq * seq * heads * dim  # causal: half of 4 s^2 h d forward, x3 with backward
    results = []

    def sdpa(backends, expand=False):
        def step():
            kk, vv = (t.repeat_interleave(heads // kv, dim=1) for t in (k, v)) if expand else (k, v)
            with sdpa_kernel(backends) if backends else torch.enable_grad():
                out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=not expand)
            out.backward(grad)

        return step

    timed(results, "sdpa default choice (GQA)", sdpa(None), useful)
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        timed(results, f"sdpa {backend.name.lower()} (GQA)", sdpa([backend]), useful)
    timed(
        results, "sdpa cudnn_attention, k/v heads expanded", sdpa([SDPBackend.CUDNN_ATTENTION], True), useful
    )
    # the layout the model passes: (batch, seq, heads, dim) tensors seen through transposes, the gradient too
    # (inside the 8B step a kernel can run slower than alone: compare with the profile of that step)
    bshd = [t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v)]
    grad_bshd = grad.transpose(1, 2).contiguous().transpose(1, 2)

    def model_layout():
        views = (t.transpose(1, 2) for t in bshd)
        F.scaled_dot_product_attention(*views, is_causal=True, enable_gqa=True).backward(grad_bshd)

    timed(results, "sdpa default choice (GQA), the model's (b, s, h, d) views", model_layout, useful)
    with torch.no_grad():
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).float()
        for backend in (SDPBackend.CUDNN_ATTENTION,):
            try:
                with sdpa_kernel([backend]):
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).float()
                print(
                    f"{name} {backend.name} vs default: relative difference "
                    f"{float((out - ref).norm() / ref.norm()):.2e}"
                )
            except Exception as err:  # noqa: BLE001
                print(f"{name} {backend.name}: {type(err).__name__}: {str(err)[:200]}")
    flash4_rows(results, q, k, v, grad, ref, useful, name)
    table(f"{name} attention per layer, fwd+bwd, causal, seq {seq}, {heads}/{kv} heads of {dim}", results)


def flash4_rows(results, q, k, v, grad, ref, useful, name, window=None) -> None:
    """FlashAttention-4 (`training.llama.flash4`, backend `flash4`) on the same (batch, heads, seq, dim)
    tensors, as the model calls it: (batch, seq, heads, dim) contiguous, the custom ops eager."""
    from training.llama.attention import windowed_attention
    from training.llama.flash4 import flash4_attention, flash4_fault

    fault = flash4_fault(q.device)
    print(f"FlashAttention-4: {fault or 'runs and matches SDPA (flash4_fault)'}")
    if fault:
        return
    qs, ks, vs = (t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
    g = grad.transpose(1, 2).contiguous()
    try:  # the output, and the gradients against the same kernel as `ref` (SDPA's, or the band mask's)
        out = flash4_attention(qs, ks, vs, window=window)
        out.backward(g)
        ours = [out.transpose(1, 2), *(t.grad.transpose(1, 2) for t in (qs, ks, vs))]
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        if window:
            want = windowed_attention(*(t.transpose(1, 2) for t in leaves), window, "band_mask")
            want = want.transpose(1, 2)
        else:
            want = F.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True)
        want.backward(grad)
        diffs = [
            float((a.float() - b.float()).norm() / b.float().norm())
            for a, b in zip(ours, [ref, *(t.grad for t in leaves)])
        ]
        print(
            f"{name} FlashAttention-4 vs reference: relative difference output {diffs[0]:.2e}, "
            f"dq {diffs[1]:.2e}, dk {diffs[2]:.2e}, dv {diffs[3]:.2e}"
        )
        for t in (qs, ks, vs):
            t.grad = None
    except Exception as err:  # noqa: BLE001 - reported in the table below
        print(f"{name} FlashAttention-4: {type(err).__name__}: {str(err)[:200]}")
    timed(
        results,
        "FlashAttention-4 (flash-attn-4, backend flash4)",
        lambda: flash4_attention(qs, ks, vs, window=window).backward(g),
        useful,
    )


def lora() -> None:
    """Llama 2 70B's attention (64 query / 8 key-value heads of 128) over one 8192-token sequence."""
    llama(64, 8, "Llama 2 70B")


def mistral() -> None:
    """Mistral 7B's sliding window (4096) over one 8192-token sequence, 32/8 heads of 128: the kernels the
    model can take (`training.llama.attention.windowed_attention`), torchtitan's FlexAttention with a window
    block mask, and plain causal cuDNN (no window) for scale; each checked against the band mask."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from training.llama.attention import TORCH_WINDOW_ATTENTION, cudnn_window_fault, windowed_attention

    dev, seq, heads, kv, dim, window = torch.device("cuda"), 8192, 32, 8, 128, 4096
    gen = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(1, seq, heads, dim, device=dev, dtype=torch.bfloat16, generator=gen, requires_grad=True)
    k, v = (
        torch.randn(1, seq, kv, dim, device=dev, dtype=torch.bfloat16, generator=gen, requires_grad=True)
        for _ in range(2)
    )
    grad = torch.randn_like(q)
    pairs = window * (window + 1) // 2 + (seq - window) * window  # (query, key) pairs inside the band
    useful = 12 * pairs * heads * dim  # 4 * pairs * h * d forward, x3 with backward
    print(f"cuDNN's banded SDPA: {cudnn_window_fault(dev) or 'runs and matches the band mask'}")
    with torch.no_grad():
        ref = windowed_attention(q, k, v, window, "band_mask").float()

    def model_kernel(backend):
        return lambda: windowed_attention(q, k, v, window, backend)

    in_band = lambda b, h, i, j: (j <= i) & (i - j < window)  # noqa: E731
    mask = create_block_mask(in_band, 1, None, seq, seq, device=dev)
    flex = torch.compile(flex_attention)

    def flex_step():
        out = flex(*(t.transpose(1, 2) for t in (q, k, v)), block_mask=mask, enable_gqa=True)
        return out.transpose(1, 2)

    def causal():
        out = F.scaled_dot_product_attention(
            *(t.transpose(1, 2) for t in (q, k, v)), is_causal=True, enable_gqa=True
        )
        return out.transpose(1, 2)

    variants = [("cuDNN banded SDPA (backend cudnn)", model_kernel("cudnn"), True)]
    if TORCH_WINDOW_ATTENTION is not None:
        variants.append(("PyTorch flash varlen_attn with window (FA2)", model_kernel("sdpa"), True))
    variants += [
        ("FlexAttention, window block mask (torchtitan's)", flex_step, True),
        ("SDPA causal, no window (cuDNN), for scale", causal, False),
    ]
    results = []
    flash4_rows(
        results, *(t.transpose(1, 2) for t in (q, k, v, grad)), ref.transpose(1, 2), useful, "Mistral", window
    )
    for name, fn, banded in variants:
        try:
            with torch.no_grad():
                out = fn().float()
            if banded:
                difference = float((out - ref).norm() / ref.norm())
                print(f"{name}: relative difference to the band mask {difference:.2e}")
        except Exception as err:  # noqa: BLE001 - reported in the table below
            print(f"{name}: {type(err).__name__}: {str(err)[:200]}")
        flop = useful if banded else 6 * seq * seq * heads * dim
        timed(results, name, lambda fn=fn: fn().backward(grad), flop)
    table(
        f"Mistral 7B attention per layer, fwd+bwd, window {window}, seq {seq}, {heads}/{kv} heads of {dim}",
        results,
    )


def main() -> int:
    parts = sys.argv[1:] or ["bert", "llama"]
    for part in parts:
        {"bert": bert, "bert-plans": bert_plans, "llama": llama, "lora": lora, "mistral": mistral}[part]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
