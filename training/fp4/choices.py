"""The values FP4's settings may take, in a module that imports nothing heavy: the config code checks them
here, and a run without FP4 never imports torchao's mx_formats (which `formats` and `gemm` need, imported
when a 4-bit linear is built)."""

MXFP4, NVFP4 = "mxfp4", "nvfp4"
RECIPES = (MXFP4, NVFP4)  # FP4_RECIPE
HEALING_PRECISIONS = ("FP8_DS",)  # HEALING_PRECISION; NVIDIA's MXFP8 healing has no counterpart here
WARMUP_RECIPES = ("", "fp8_hybrid")  # WARMUP_RECIPE: AMD's synthetic warm-up in FP8 (HYBRID), then 4 bits
EMULATED, SCALED_MM = "emulated", "scaled_mm"  # the 4-bit GEMM kernels (`gemm`)


def describe_kernel(kernel: str) -> str:
    if kernel == EMULATED:
        return "emulated (quantize, dequantize, float32 GEMM): for numerics, not speed"
    return "torch._scaled_mm block-scaled FP4 GEMM (sm100)"
