"""One provider per concern: which accelerator library each part of a run uses, chosen once at start and
logged. Vendor libraries (Transformer Engine, apex, flash-attn) are used when the image has them; the
PyTorch-native paths are what runs everywhere else."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform

import torch

OPTIONAL = {
    "transformer_engine": "transformer_engine",
    "apex": "apex",
    "flash_attn": "flash_attn",
    "torchao": "torchao",
    "megatron_core": "megatron.core",
}


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def available() -> dict[str, bool]:
    return {name: importable(module) for name, module in OPTIONAL.items()}


def platform_name() -> str:
    if torch.cuda.is_available():
        return "rocm" if torch.version.hip else "cuda"
    return "cpu"


def torch_flash_fault() -> str | None:
    """Why PyTorch's own varlen FlashAttention-2 kernel (BERT's `torch_flash`) cannot run here, or None:
    it needs a CUDA build and a GPU the kernel was built for; a tiny call with dropout tells."""
    if not (torch.cuda.is_available() and torch.version.cuda):
        return "it needs an NVIDIA GPU and a CUDA build of PyTorch"
    try:
        x = torch.randn(8, 2, 64, device="cuda", dtype=torch.bfloat16)
        cu = torch.tensor([0, 3, 8], device="cuda", dtype=torch.int32)
        torch.ops.aten._flash_attention_forward(x, x, x, cu, cu, 8, 8, 0.1, False, False)
    except (RuntimeError, AttributeError) as err:
        return f"PyTorch's varlen flash kernel failed on {torch.cuda.get_device_name()}: {err}"[:300]
    return None


def choose_attention(requested: str) -> str:
    """`auto`: flash-attn's varlen kernel on a GPU that has it, else PyTorch's own (`torch_flash`) on
    NVIDIA GPUs where it runs, else PyTorch SDPA with a block mask, preferring cuDNN's kernel on NVIDIA."""
    gpu = torch.cuda.is_available()
    if requested == "auto":
        if gpu and importable("flash_attn"):
            return "flash_attn"
        if gpu and torch.version.cuda:
            return "torch_flash" if torch_flash_fault() is None else "sdpa_cudnn"
        return "sdpa"
    if requested == "flash_attn" and not (gpu and importable("flash_attn")):
        raise ValueError("ATTENTION=flash_attn but flash-attn is not importable on a GPU here")
    if requested == "torch_flash" and (fault := torch_flash_fault()):
        raise ValueError(f"ATTENTION=torch_flash: {fault}")
    return requested


def choose_precision(requested: str) -> str:
    """`auto`: bf16 on a GPU, fp32 on the CPU. `fp8` needs Transformer Engine or torchao."""
    if requested == "auto":
        return "bf16" if torch.cuda.is_available() else "fp32"
    if requested == "fp8" and not (importable("transformer_engine") or importable("torchao")):
        raise ValueError("PRECISION=fp8 needs Transformer Engine or torchao; neither is importable")
    return requested


def versions() -> dict[str, str]:
    """Versions worth recording with every run."""
    out = {"python": platform.python_version(), "torch": torch.__version__}
    if torch.version.cuda:
        out["cuda"] = torch.version.cuda
    if torch.version.hip:
        out["hip"] = torch.version.hip
    for name, module in OPTIONAL.items():
        if importable(module):
            try:
                out[name] = importlib.import_module(module.split(".")[0]).__version__
            except (ImportError, AttributeError):
                try:  # e.g. megatron-core: the `megatron` namespace package has no __version__
                    out[name] = importlib.metadata.version(name.replace("_", "-"))
                except importlib.metadata.PackageNotFoundError:
                    out[name] = "unknown"
    from importlib.metadata import version

    out["mlperf_logging"] = version("mlperf-logging")
    return out
