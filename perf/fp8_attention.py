"""FP8 attention (FP8_DPA=1, backend `cudnn_fp8`: cuDNN's FP8 SDPA, `training.llama.fp8_attention`) beside
bf16 attention on the Llama 2 70B LoRA's shapes: 64 query / 8 key-value heads of 128, one 8192-token row,
plain (one sequence, the MLCommons rows) and packed (4 sequences of 3072, 2560, 1536 and 1024 tokens).

    python -m perf.fp8_attention        # one NVIDIA GPU with nvidia-cudnn-frontend; $OUT/fp8_attention.json

- Which output dtype the backend runs with here, or why it cannot run (`fp8_attention_fault`).
- Accuracy at 2048 tokens (the float32 reference's score matrix fits): the relative error (norm-wise) of the
  output and of dQ, dK, dV against float32 attention, for FP8 and for bf16 SDPA (the peer), plain and packed.
- Speed at 8192 tokens: forward, and forward + backward, median ms (CUDA events) of the model's own
  `attention` call per backend: `sdpa` (cuDNN's bf16 flash kernel on Hopper; FlashAttention-2's varlen kernel
  for the packed row) against `cudnn_fp8` (its casts and, packed, its padding included; its scales from a
  filled amax history), each eager and under torch.compile (which may fuse the casts). Useful FLOP count
  real (query, key) pairs only: 4 x pairs x heads x head_dim forward, 3 times that with the backward.
- Where the time goes: the kernels of one eager forward + backward per backend (torch.profiler).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import torch

from perf.lib.timing import print_profile, time_steps, versions
from training.llama.attention import attention
from training.llama.fp8_attention import (
    attention_error,
    fp8_attention_fault,
    gradient_dtype,
    new_history,
    reference,
)

HEADS, KV, DIM, SEQ = 64, 8, 128, 8192
PACKED = (3072, 2560, 1536, 1024)


def inputs(seq: int, device, generator, dtype=torch.bfloat16):
    q = torch.randn(1, seq, HEADS, DIM, device=device, generator=generator)
    k, v = (torch.randn(1, seq, KV, DIM, device=device, generator=generator) for _ in range(2))
    return [t.to(dtype).requires_grad_() for t in (q, k, v)]


def bounds(lengths, device) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)


def errors(backend: str, exact, cu, generator) -> dict[str, float]:
    """Relative errors of `backend` on bf16 copies of `exact` against float32 attention (output, dq, dk,
    dv); FP8 attention's in the steady state, the second of two steps (the first fills its amax history)."""
    slow = [t.detach().float().requires_grad_() for t in exact]
    want = reference(*slow, cu_seqlens=cu)
    g = torch.randn(want.shape, device=want.device, generator=generator)
    history = new_history(want.device) if backend == "cudnn_fp8" else None
    for _ in range(1 if history is None else 2):
        fast = [t.detach().bfloat16().requires_grad_() for t in exact]
        got = attention(*fast, backend, cu_seqlens=cu, fp8_history=history)
        (got.float() * g).sum().backward()
    (want * g).sum().backward()
    out = {"output": attention_error(got, want)}
    out.update({f"d{n}": attention_error(a.grad, b.grad) for n, a, b in zip("qkv", fast, slow)})
    return out


def pairs(lengths) -> int:
    return sum(n * (n + 1) // 2 for n in lengths)


def main() -> int:
    device = torch.device("cuda")
    generator = torch.Generator(device=device).manual_seed(0)
    fault = fp8_attention_fault(device)
    import cudnn

    record = {
        "device": torch.cuda.get_device_name(),
        "versions": versions(),
        "cudnn_backend": cudnn.backend_version(),
        "cudnn_frontend": cudnn.__version__,
        "fault": fault,
        "accuracy": {},
        "speed": {},
    }
    print(
        f"{record['device']}, torch {torch.__version__}, cuDNN {record['cudnn_backend']}, frontend "
        f"{record['cudnn_frontend']}: FP8 attention {fault or 'runs'}",
        flush=True,
    )
    if fault:
        print(json.dumps(record))
        return 1
    record["gradient_dtype"] = str(gradient_dtype(device))
    cases = {"plain": None, "packed": bounds([768, 640, 384, 256], device)}
    for case, cu in cases.items():
        exact = [t.detach().float() for t in inputs(2048, device, generator)]
        for backend in ("sdpa", "cudnn_fp8"):
            record["accuracy"][f"{case} {backend}"] = errors(backend, exact, cu, generator)
            print(f"accuracy, {case}, {backend}: {record['accuracy'][f'{case} {backend}']}", flush=True)
    rows = []
    for case, lengths in (("plain", [SEQ]), ("packed", list(PACKED))):
        cu = None if case == "plain" else bounds(lengths, device)
        q, k, v = inputs(SEQ, device, generator)
        grad = torch.randn_like(q)
        useful = 4 * pairs(lengths) * HEADS * DIM
        for backend, compiled in (("sdpa", False), ("cudnn_fp8", False), ("sdpa", True), ("cudnn_fp8", True)):
            # FP8 attention in its steady state: scales from the amax history, which the warm-up fills
            history = new_history(device) if backend == "cudnn_fp8" else None
            call = torch.compile(attention) if compiled else attention
            label = f"{backend} compiled" if compiled else backend

            def forward(q=q, k=k, v=v, backend=backend, cu=cu, call=call, history=history):
                with torch.no_grad():
                    call(q, k, v, backend, cu_seqlens=cu, fp8_history=history)

            def both(q=q, k=k, v=v, backend=backend, cu=cu, grad=grad, call=call, history=history):
                call(q, k, v, backend, cu_seqlens=cu, fp8_history=history).backward(grad)

            for what, step, flop in (("forward", forward, useful), ("forward+backward", both, 3 * useful)):
                name = f"{case} {what} {label}"
                try:
                    times = time_steps(step, 3, 20, device)
                except Exception as err:  # noqa: BLE001 - a compile failure is a row too, not the end
                    record["speed"][name] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
                    print(f"{name}: failed: {record['speed'][name]['error']}", flush=True)
                    continue
                ms = statistics.median(times)
                record["speed"][name] = {
                    "ms": ms,
                    "spread_ms": [min(times), max(times)],
                    "useful_tflop": flop / 1e12,
                    "tflops": flop / ms / 1e9,
                }
                rows.append((name, ms, flop / ms / 1e9))
                print(f"{name}: {ms:.3f} ms, {flop / ms / 1e9:.0f} TFLOP/s", flush=True)
            if case == "plain" and not compiled:  # where the time goes: the kernels and the casts around them
                print_profile(both, steps=3, top=12, title=f"profile, plain forward+backward, {label}:")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "fp8_attention.json").write_text(json.dumps(record, indent=2) + "\n")
    dtype = record["gradient_dtype"]
    print(
        f"\nLlama 2 70B attention, {HEADS}/{KV} heads of {DIM}, {SEQ} tokens; FP8, gradients out in {dtype}"
    )
    print("| case | ms | useful TFLOP/s | FP8 speed-up |\n|---|---|---|---|")
    for name, ms, rate in rows:
        peer = record["speed"].get(name.replace("cudnn_fp8", "sdpa"))
        ratio = f"{peer['ms'] / ms:.2f}x" if "cudnn_fp8" in name and "ms" in (peer or {}) else ""
        print(f"| {name} | {ms:.3f} | {rate:.0f} | {ratio} |")
    print("\n| accuracy (2048 tokens, relative to float32) | output | dq | dk | dv |\n|---|---|---|---|---|")
    for name, e in record["accuracy"].items():
        print(f"| {name} | {e['output']:.4f} | {e['dq']:.4f} | {e['dk']:.4f} | {e['dv']:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
