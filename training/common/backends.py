"""What this machine has: the platform, which optional accelerator libraries import, the versions worth
recording with every run, and the compute precision `auto` means here. Each concern's provider (attention,
FP8, optimizer) is chosen by the package that owns it and logged at start; vendor libraries (Transformer
Engine, apex, flash-attn) are used when the image has them, the PyTorch-native paths everywhere else."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform

import torch

OPTIONAL = {
    "transformer_engine": "transformer_engine",
    "apex": "apex",
    "flash_attn": "flash_attn.flash_attn_interface",  # FlashAttention-2 (flash-attn-4 shares `flash_attn`)
    "flash_attn_4": "flash_attn.cute",
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


def accelerator_name() -> str:
    """The first GPU's name (all of a node's are alike), or "cpu"."""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def choose_precision(requested: str, device: torch.device | None = None) -> str:
    """`auto`: bf16 on a GPU, fp32 on the CPU (the run's `device`, when given; else this machine's); anything
    else as asked (`fp8`: bf16 with FP8 matmuls, whose backend `training.fp8.choose_backend` picks)."""
    if requested == "auto":
        on_gpu = device.type == "cuda" if device is not None else torch.cuda.is_available()
        return "bf16" if on_gpu else "fp32"
    return requested


def _version(name: str, module: str) -> str:
    """The installed distribution's version first: flash-attn and flash-attn-4 share the `flash_attn` package
    (whose `__version__` is flash-attn's), and the `megatron` namespace package has none; else the module's
    `__version__`, else "unknown"."""
    try:
        return importlib.metadata.version(name.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return importlib.import_module(module.split(".")[0]).__version__
    except (ImportError, AttributeError):
        return "unknown"


def versions() -> dict[str, str]:
    """Versions worth recording with every run."""
    out = {"python": platform.python_version(), "torch": torch.__version__}
    if torch.version.cuda:
        out["cuda"] = torch.version.cuda
    if torch.version.hip:
        out["hip"] = torch.version.hip
    for name, module in OPTIONAL.items():
        if importable(module):
            out[name] = _version(name, module)
    from importlib.metadata import version

    out["mlperf_logging"] = version("mlperf-logging")
    return out
