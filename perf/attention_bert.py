"""Attention for BERT's packed rows on one GPU: forward+backward time of each way to keep sequences apart.

    python perf/attention_bert.py

48 rows x 512 tokens, 16 heads of 64, rows of 1-3 sequences (2 on average) as in bench_bert.py. Variants:
SDPA with a block-diagonal bool mask under each backend that accepts it (dropout 0.1, as BERT trains),
flex_attention with a document block mask, and PyTorch's varlen kernel (neither has dropout). Prints a
table last: median ms (CUDA events), and the effective TFLOP/s counting only within-sequence work.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from perf.bench_bert import ROWS, SEQ, packed_rows, time_steps  # noqa: E402
from training.bert import data  # noqa: E402
from training.bert.attention import block_diagonal_mask  # noqa: E402

HEADS, DIM = 16, 64


def main() -> int:
    dev = torch.device("cuda")
    rows = packed_rows(np.random.default_rng(0), ROWS, 30522)
    b = data.collate(rows, SEQ).to(dev)
    lens = [int(n) for r in rows for n in r[4]]
    useful = 3 * 4 * HEADS * DIM * sum(n * n for n in lens)  # fwd + bwd (= 2x fwd), QK^T and PV
    q, k, v = (torch.randn(ROWS, HEADS, SEQ, DIM, device=dev, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))  # fmt: skip
    mask = block_diagonal_mask(b.seq_ids)
    grad = torch.randn_like(q)
    results = []

    def run(name, fn):
        def step():
            out = fn()
            out.backward(grad)

        try:
            ms = statistics.median(time_steps(step, 3, 20))
            results.append((name, ms, useful / ms / 1e9))
        except Exception as err:  # noqa: BLE001 - a backend that refuses these inputs is a result too
            results.append((name, float("nan"), f"{type(err).__name__}: {str(err)[:80]}"))

    for backend in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH):
        for p in (0.1, 0.0):

            def fn(backend=backend, p=p):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)

            run(f"sdpa mask {backend.name.lower()} dropout {p}", fn)
    run("sdpa no mask flash (not per-sequence; lower bound)", lambda: F.scaled_dot_product_attention(q, k, v))

    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    ids = b.seq_ids.int()

    def doc(b_, h, qi, ki):
        return ids[b_, qi] == ids[b_, ki]

    block = create_block_mask(doc, ROWS, None, SEQ, SEQ, device=dev)
    flex = torch.compile(flex_attention)
    run("flex_attention doc mask (no dropout)", lambda: flex(q, k, v, block_mask=block))

    from torch.nn.attention.varlen import varlen_attn

    flat = [t.detach().transpose(1, 2).reshape(ROWS * SEQ, HEADS, DIM).requires_grad_() for t in (q, k, v)]
    gflat = grad.transpose(1, 2).reshape(ROWS * SEQ, HEADS, DIM)

    def varlen_step():
        out = varlen_attn(*flat, b.cu_seqlens, b.cu_seqlens, b.max_seqlen, b.max_seqlen)
        out.backward(gflat)

    try:
        ms = statistics.median(time_steps(varlen_step, 3, 20))
        results.append(("torch varlen_attn (no dropout)", ms, useful / ms / 1e9))
    except Exception as err:  # noqa: BLE001
        results.append(("torch varlen_attn (no dropout)", float("nan"), f"{type(err).__name__}: {err}"[:90]))

    with torch.no_grad():
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).float()
            err = float((out - ref).norm() / ref.norm())
            print(f"{backend.name} vs fp32 math, no dropout: relative error {err:.2e}")
    print(f"\nper layer, fwd+bwd, {ROWS}x{SEQ} tokens, {len(lens)} sequences; x24 layers per step")
    print("| variant | ms | useful TFLOP/s |\n|---|---|---|")
    for name, ms, rate in results:
        print(f"| {name} | {ms:.2f} | {rate if isinstance(rate, str) else f'{rate:.0f}'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
