"""One LoRA adapter's forward and backward at the Llama 2 70B width, our Triton dropout-and-A kernel against
PyTorch's dropout then A, both compiled (what a block runs), and the kernel's check on this GPU.

    python -m perf.lora_adapter [--tokens 8192] [--width 8192] [--out 10240] [--rank 16] [--sweep]

Each row: y = base + (alpha / rank) * B(A(dropout(x))) with x (tokens, width) bf16 and base (tokens, out), the
frozen projection's output it is added to, then y's sum backward (x's and the adapter's gradients). CUDA-event
median of 20 runs after 5; the forward alone too. `--sweep` first times the kernels alone over their launch
settings (`training.lora.kernels`: rows per tile, warps, the forward's and the backward's splits) and runs
the rows with the fastest.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
from pathlib import Path

import torch

from perf.lib.timing import time_steps
from training.lora import LoraAdapter, LoraSettings, fused

kernels = fused.kernels  # None without Triton


def median_ms(fn, warmup: int = 5, runs: int = 20) -> float:
    return statistics.median(time_steps(fn, warmup, runs, torch.device("cuda", torch.cuda.current_device())))


def sweep(x: torch.Tensor, rank: int) -> dict:
    """Each launch setting's forward and backward kernel times (`kernels.launched_with`), and the fastest."""
    a = torch.randn(rank, x.shape[1], device=x.device, dtype=x.dtype) / x.shape[1] ** 0.5
    g = torch.randn(x.shape[0], rank, device=x.device, dtype=x.dtype)
    seed = torch.tensor([1], device=x.device)
    rows = []
    for bm, warps, fsplit, split in itertools.product((32, 64, 128), (4, 8), (1, 2, 4), (2, 4, 8, 16)):
        try:
            with kernels.launched_with(kernels.Launch(bm, warps, fsplit, split)):
                fwd = median_ms(lambda: kernels.dropout_down(x, a, seed, 0.1), 3, 10)
                bwd = median_ms(lambda: kernels.dropout_down_backward(g, x, a, seed, 0.1), 3, 10)
        except Exception as err:  # a setting Triton cannot compile (shared memory, registers)
            print(f"  BM {bm} warps {warps}: {type(err).__name__}")
            continue
        rows.append(dict(bm=bm, warps=warps, forward_split=fsplit, split=split, fwd=fwd, bwd=bwd))
    fastest_fwd = min(rows, key=lambda r: r["fwd"])
    fastest_bwd = min(rows, key=lambda r: r["bwd"])
    print(f"sweep: forward {fastest_fwd}, backward {fastest_bwd}")
    ranked = sorted(rows, key=lambda r: r["fwd"] + r["bwd"])
    for r in ranked[:8]:
        print(f"  {r}")
    return {"rows": rows, "chosen": ranked[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--width", type=int, default=8192)
    ap.add_argument("--out", type=int, default=10240)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--sweep", action="store_true", help="time the kernels' launch settings first")
    args = ap.parse_args()
    if kernels is None or not torch.cuda.is_available():
        raise SystemExit("perf/lora_adapter.py needs a GPU and Triton")
    device = torch.device("cuda")
    fault = fused.dropout_down_fault(device)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; kernel check: {fault or 'passed'}")
    x = torch.randn(args.tokens, args.width, device=device, dtype=torch.bfloat16, requires_grad=True)
    base = torch.randn(args.tokens, args.out, device=device, dtype=torch.bfloat16)
    swept = sweep(x.detach(), args.rank) if args.sweep else None
    launch = kernels.Launch()  # the rows below run with the sweep's fastest, where it ran
    if swept:
        best = swept["chosen"]
        launch = kernels.Launch(best["bm"], best["warps"], best["forward_split"], best["split"])
    rows = {}
    for name, kernel in (("pytorch", False), ("triton", True)):
        settings = LoraSettings(args.rank, 2.0 * args.rank, 0.1)
        adapter = LoraAdapter(args.width, args.out, settings, kernel=kernel)
        adapter.to(device)
        with torch.no_grad():
            adapter.lora_b.weight.normal_(std=0.01)
        step = torch.compile(lambda a=adapter: base + a(x))

        def forward(step=step):
            with torch.autocast("cuda", torch.bfloat16):
                return step()

        def both(forward=forward):
            forward().sum().backward()

        with kernels.launched_with(launch):
            with torch.no_grad():
                rows[name] = {"forward_ms": median_ms(forward)}
            rows[name]["forward_backward_ms"] = median_ms(both)
    print("| LoRA dropout and A | forward ms | forward + backward ms |\n|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['forward_ms']:.3f} | {r['forward_backward_ms']:.3f} |")
    if os.environ.get("OUT"):
        results = {**vars(args), **rows, "sweep": swept}
        Path(os.environ["OUT"], "lora_adapter.json").write_text(json.dumps(results, indent=2))
    return 0 if not fault else 1


if __name__ == "__main__":
    sys.exit(main())
