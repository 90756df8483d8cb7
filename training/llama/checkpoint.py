"""Hugging Face Llama checkpoints (`config.json` + safetensors shards) loaded straight into our model,
sharded.

Each rank reads only the rows of each tensor that its FSDP2 shard holds (`safetensors`' lazy slices), in the
checkpoint's files as they were downloaded: no conversion step, no full copy of the model in any process's
memory. Tensors are cast as they are read to the dtype of the parameter (bf16 for a frozen base).

Our own code rather than `torch.distributed.checkpoint`'s Hugging Face reader, for what that reader lacks
here: progress of a 138 GB read, the name mapping to our module (Hugging Face's `model.` prefix, the rotary
buffers it skips), errors that name the tensor and both shapes, and a check that every base parameter was
loaded.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from training.common.outcome import DataError
from training.llama.model import LlamaShape


class CheckpointError(DataError, ValueError):
    """A checkpoint that does not fit the model; the message names the file and the tensor. The base model is
    the run's input: its outcome is a data error."""


def shape_from_hf_config(folder: Path) -> LlamaShape:
    """The `LlamaShape` of a Hugging Face Llama checkpoint's config.json (Llama 2: no RoPE scaling)."""
    path = Path(folder) / "config.json"
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: unreadable ({err})") from None
    try:
        if cfg.get("rope_scaling") not in (None, {}):
            raise CheckpointError(
                f"{path}: rope_scaling {cfg['rope_scaling']} is not supported (Llama 2 has none)"
            )
        return LlamaShape(
            num_layers=cfg["num_hidden_layers"],
            hidden_size=cfg["hidden_size"],
            ffn_hidden_size=cfg["intermediate_size"],
            num_heads=cfg["num_attention_heads"],
            num_kv_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
            vocab_size=cfg["vocab_size"],
            max_seq_length=cfg.get("max_position_embeddings", 4096),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
            rope_scaling=None,
            norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
        )
    except KeyError as err:
        raise CheckpointError(f"{path}: no {err.args[0]}") from None


def checkpoint_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> safetensors file, from `model.safetensors.index.json` or one `model.safetensors`."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = {name: folder / file for name, file in weight_map.items()}
        missing = sorted({str(p) for p in files.values() if not p.exists()})
        if missing:
            raise CheckpointError(f"{index} lists files that are missing: {', '.join(missing)}")
        return files
    single = folder / "model.safetensors"
    if not single.exists():
        raise CheckpointError(f"{folder}: no model.safetensors.index.json or model.safetensors")
    from safetensors import safe_open

    with safe_open(single, "pt") as f:
        return dict.fromkeys(f.keys(), single)


def _local_region(param: torch.Tensor) -> tuple[torch.Tensor, tuple[slice, ...]]:
    """(the tensor this rank holds, the region of the full tensor it covers)."""
    if not isinstance(param, DTensor):
        return param.data, tuple(slice(0, n) for n in param.shape)
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    return param._local_tensor, tuple(slice(o, o + n) for o, n in zip(offset, shape))


def _in_adapter(name: str) -> bool:
    return ".qkv_adapter." in name or ".o_adapter." in name


def hf_name(name: str) -> str:
    """Our parameter name -> Hugging Face's (`LlamaForCausalLM`: all but the output layer under `model.`)."""
    return name if name.startswith("lm_head.") else f"model.{name}"


@torch.no_grad()
def load_hf_checkpoint(module: nn.Module, folder: Path, show_progress: bool = True, under: str = "") -> int:
    """Copy a Hugging Face Llama checkpoint into the parameters of `module` (the model, or the part of it at
    path `under`, e.g. "layers.3."; plain or FSDP2-sharded), each rank reading its own rows. The adapters in
    the attention's LoRA slots (`qkv_adapter`, `o_adapter`) are not in checkpoints and are left alone; any
    other parameter missing from the checkpoint, or a tensor of another shape, is an error naming it.
    Returns the bytes this rank read."""
    files = checkpoint_files(folder)
    params = {name: p for name, p in module.named_parameters() if not _in_adapter(under + name)}
    wanted = {hf_name(under + name): name for name in params}
    missing = sorted(set(wanted) - set(files))
    if missing:
        raise CheckpointError(
            f"{folder}: the checkpoint lacks {len(missing)} tensor(s) of the model, e.g. "
            f"{', '.join(missing[:3])}"
        )
    from safetensors import safe_open

    by_file: dict[Path, list[str]] = {}
    for theirs in wanted:
        by_file.setdefault(files[theirs], []).append(theirs)
    progress = _Progress(len(wanted), show_progress)
    for path, names in sorted(by_file.items()):
        with safe_open(path, "pt") as f:
            for theirs in names:
                param = params[wanted[theirs]]
                lazy = f.get_slice(theirs)
                if tuple(lazy.get_shape()) != tuple(param.shape):
                    raise CheckpointError(
                        f"{path.name}: {theirs} has shape {tuple(lazy.get_shape())}, the "
                        f"model's {wanted[theirs]} {tuple(param.shape)}"
                    )
                local, region = _local_region(param)
                if local.numel():
                    rows = lazy[region]
                    _data(local).copy_(rows.to(local.dtype))
                    progress.add(rows.numel() * rows.element_size())
                else:
                    progress.add(0)
    progress.done()
    return progress.bytes


def _data(t: torch.Tensor) -> torch.Tensor:
    """The plain storage of a parameter's local tensor (under the native FP8 all-gather's wrapper too)."""
    from training.fp8.gather import local_data

    return local_data(t)


class _Progress:
    """A line every ~10% of the tensors: tensors done, bytes read, rate."""

    def __init__(self, total: int, show: bool):
        self.total, self.show, self.count, self.bytes = total, show, 0, 0
        self.start, self.next_report = time.perf_counter(), 0.1

    def add(self, nbytes: int) -> None:
        self.count += 1
        self.bytes += nbytes
        if self.show and self.count / self.total >= self.next_report:
            self.next_report += 0.1
            self._print()

    def _print(self) -> None:
        seconds = time.perf_counter() - self.start
        rate = self.bytes / 1e9 / max(seconds, 1e-9)
        print(
            f"loading weights: {self.count}/{self.total} tensors, {self.bytes / 1e9:.2f} GB read by this "
            f"rank ({rate:.2f} GB/s)",
            file=sys.stderr,
            flush=True,
        )

    def done(self) -> None:
        if self.show and self.count and self.next_report <= 1.0:
            self._print()
