"""Whether a model can fit, said in one line before anything is built.

A run holds, per parameter, its weights, its gradient and AdamW's two moments: 16 bytes (fp32 weights or bf16
weights with fp32 masters, fp32 or bf16 gradients, two fp32 moments), spread over the ranks by FSDP2. That
alone is a floor, never an estimate of the peak (activations and the gathered blocks come on top): a model
whose floor exceeds the memory of a GPU (or, without a GPU, the memory this machine has available per
process) cannot run, and building it first only ends in an allocation error on every rank.

Once a model runs, `memory_at_forward_end` measures what its forward leaves allocated for the backward
(`--batch_size auto`, and the LoRA bench's memory step).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch

from training.throughput.config import ModelSpec

STATE_BYTES = 16  # per parameter: weights (or bf16 weights + fp32 masters), gradient, AdamW's two moments
GIB = 2**30
TRY_ON_CPU = "configs/throughput/tiny-llama.json"


class CannotFit(RuntimeError):
    """The model's state alone is larger than the memory it would run in; the message says both, `short` in
    a few words (the suite's table)."""

    def __init__(self, message: str, short: str = ""):
        super().__init__(message)
        self.short = short or message


def parameters(spec: ModelSpec) -> int:
    """The model's parameter count from its config: exact for the Llama shapes; for FLUX the blocks'
    matrices and modulations (diffusers' FluxTransformer2DModel layout, within 1% of its 11.9 B)."""
    if spec.shape is not None:
        return spec.shape.num_params()
    t = spec.flux.transformer
    d = t.get("num_attention_heads", 24) * t.get("attention_head_dim", 128)
    # a double block: per stream q, k, v, out (4 D^2), the 4x MLP (8 D^2) and the AdaLN modulation (6 D^2);
    # a single block: q, k, v and the MLP up (7 D^2), the projection out of their concatenation (5 D^2),
    # its modulation (3 D^2)
    blocks = t.get("num_layers", 19) * 2 * 18 * d * d + t.get("num_single_layers", 38) * 15 * d * d
    embedders = (t.get("in_channels", 64) + t.get("joint_attention_dim", 4096) + 2 * 256) * d + 4 * d * d
    return blocks + embedders + (t.get("pooled_projection_dim", 768) + 2 * d) * d


def available_memory(device_count: int, local_ranks: int, gpu) -> tuple[float, str]:
    """(bytes one rank may use, where): one GPU's memory (`gpu`: torch's device properties, None without a
    GPU), else this machine's available memory (Linux's MemAvailable) shared by the `local_ranks` processes
    of this node; (inf, "") when it cannot be read."""
    if gpu is not None:
        return float(gpu.total_memory), f"{device_count} x {gpu.name} ({gpu.total_memory / GIB:.1f} GiB each)"
    try:
        meminfo = Path("/proc/meminfo").read_text()
        kib = next(int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return float("inf"), ""
    share = kib * 1024 / max(local_ranks, 1)
    return share, f"this machine's {kib * 1024 / GIB:.1f} GiB available over {local_ranks} process(es)"


def check_fits(spec: ModelSpec, world: int, on_gpu: bool, memory: float, where: str) -> None:
    """Raise CannotFit when the model's state alone, sharded over `world` ranks, exceeds `memory` bytes."""
    params = parameters(spec)
    need = STATE_BYTES * params / world
    if need <= memory:
        return
    per = "GPU" if on_gpu else "process"
    floor = (
        f"its weights, gradients and AdamW state alone need {need / GIB:.1f} GiB per {per} "
        f"({params / 1e9:.2f} B parameters x {STATE_BYTES} bytes over {world} rank(s))"
    )
    short = f"does not fit: needs {need / GIB:.1f} GiB per {per} for its state alone"
    if on_gpu:
        raise CannotFit(
            f"{spec.name} does not fit on {where}: {floor}; use more GPUs (--nproc_per_node) or "
            "fewer blocks (--num_layers N)",
            f"{short}, {memory / GIB:.1f} GiB a GPU",
        )
    try_it = f"torchrun --nproc_per_node=2 train_fsdp.py {TRY_ON_CPU} llama"
    raise CannotFit(
        f"no GPU here, and {spec.name} cannot run on this CPU: {floor}, more than {where}. The "
        f"suite measures GPUs; to try it on a CPU: {try_it}",
        f"no GPU here; {short}, {memory / GIB:.1f} GiB available",
    )


def check_this_node(spec: ModelSpec, world: int, local_ranks: int) -> None:
    """check_fits with this node's GPUs (the first one's memory) or its available memory; also a torchrun
    that starts more ranks on this node than it has GPUs."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count and local_ranks > count:
        raise CannotFit(
            f"{local_ranks} processes on this node but {count} GPU(s) visible: start at most "
            f"{count} (--nproc_per_node)"
        )
    gpu = torch.cuda.get_device_properties(0) if count else None
    memory, where = available_memory(count, local_ranks, gpu)
    check_fits(spec, world, gpu is not None, memory, where)


def launch_sizes() -> tuple[int, int]:
    """(ranks in all, ranks on this node) as torchrun (or a single process) gives them."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return world, int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))


@contextlib.contextmanager
def memory_at_forward_end(model: torch.nn.Module, device: torch.device):
    """Yields a list that gets the GPU memory allocated (bytes) each time `model`'s forward returns: with
    the memory before a step, what its forward leaves for the backward."""
    seen: list[int] = []
    hook = model.register_forward_hook(lambda *_: seen.append(torch.cuda.memory_allocated(device)))
    try:
        yield seen
    finally:
        hook.remove()
