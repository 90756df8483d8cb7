"""What the 4-bit recipes cost here: one linear layer's forward and backward on the shapes of both Llama
models, in bf16, in native FP8 and in each FP4 recipe (emulated GEMMs; on an sm100 GPU also the real
block-scaled GEMM, compared with the emulated one for equality):

    python -m perf.fp4_gemm_bench            # a GPU: the models' shapes, 8192 tokens
    python -m perf.fp4_gemm_bench --cpu      # the CPU: small shapes, the same table

Prints one line per (shape, mode): milliseconds per forward+backward and the ratio to bf16. The emulated
FP4 path is for numerics, not speed (it quantizes, dequantizes and multiplies in float32): the table says by
how much it is slower, so nobody takes it for a speed mode.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from training.fp4 import Fp4Settings, apply_fp4, gemm
from training.fp4.linear import Fp4Recipe
from training.fp8 import Fp8Settings, apply_fp8

# (tokens, in_features, out_features): Llama 3.1 8B's MLP up and down projections, Llama 2 70B's
GPU_SHAPES = [(8192, 4096, 14336), (8192, 14336, 4096), (8192, 8192, 28672), (8192, 28672, 8192)]
CPU_SHAPES = [(256, 256, 512), (256, 512, 256)]
RECIPES = {
    "mxfp4+hadamard (AMD)": Fp4Recipe("mxfp4", mxfp4_hadamard=True),
    "nvfp4 (NVIDIA's v6.0 switches)": Fp4Recipe("nvfp4", nvfp4_rht=False, nvfp4_2d=False),
}


class One(nn.Module):
    """One linear under `layers.0`, the name the FP8 and FP4 swaps take."""

    def __init__(self, k: int, n: int, device: torch.device):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(k, n, bias=False, device=device)])

    def forward(self, x):
        return self.layers[0](x)


def timed(model: nn.Module, x: torch.Tensor, repeat: int) -> float:
    """Milliseconds per forward and backward (bf16 autocast), after one untimed pass."""
    device = x.device

    def once():
        with torch.autocast(device.type, torch.bfloat16):
            model(x).float().sum().backward()

    once()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        once()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeat * 1e3


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--cpu", action="store_true", help="small shapes on the CPU")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    device = torch.device("cpu" if args.cpu or not torch.cuda.is_available() else "cuda")
    shapes = CPU_SHAPES if device.type == "cpu" else GPU_SHAPES
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device: {name}; FP4 GEMM kernel here: {gemm.describe(gemm.choose_kernel(device))}")
    for m, k, n in shapes:
        torch.manual_seed(0)
        x = torch.randn(m, k, device=device, requires_grad=True)
        base = One(k, n, device)
        results = {"bf16": timed(base, x, args.repeat)}
        fp8 = One(k, n, device)
        fp8.load_state_dict(base.state_dict())
        apply_fp8(fp8, Fp8Settings(backend="native"))
        results["fp8 native (delayed scaling)"] = timed(fp8, x, args.repeat)
        for label, recipe in RECIPES.items():
            for kernel in {gemm.EMULATED, gemm.choose_kernel(device)}:
                fp4 = One(k, n, device)
                fp4.load_state_dict(base.state_dict())
                apply_fp4(fp4, Fp4Settings(recipe, kernel=kernel), Fp8Settings(backend="native"), device)
                results[f"{label}, {kernel}"] = timed(fp4, x, args.repeat)
            if gemm.choose_kernel(device) == gemm.SCALED_MM:  # the real GEMM against the emulated one
                w = base.layers[0].weight.detach()
                fmt = recipe.format
                real = recipe.forward_gemm(x.detach(), w, gemm.SCALED_MM)
                emulated = recipe.forward_gemm(x.detach(), w, gemm.EMULATED)
                gap = ((real - emulated).abs().max() / emulated.abs().max()).item()
                print(f"  {m}x{k}x{n} {fmt}: real vs emulated forward GEMM, max relative gap {gap:.2e}")
        for mode, ms in results.items():
            print(f"{m}x{k}x{n}  {mode:40s} {ms:9.2f} ms  {ms / results['bf16']:6.2f}x bf16")


if __name__ == "__main__":
    main()
