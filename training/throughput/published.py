"""AMD's published figures (the seed: "ROCm PyTorch Training Container (v25.2)", its MI300X and MI325X tables)
and which of those GPUs a run's figure is set beside: the detected one where the table has it, else the
closest by peak dense BF16 rate and memory (an NVIDIA H100 or H200 is closest to the MI300X)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    model: str  # the `name` of our JSON configs
    precision: str  # bf16 | fp8
    seq: int | None  # None: FLUX (images)
    batch: int  # per GPU, 8 GPUs
    value: float
    unit: str = "TFLOP/s/GPU"  # in AMD's accounting (flops.amd); FLUX: images per second per GPU

    @property
    def config(self) -> str:
        """Our config file for this row (configs/throughput/)."""
        return CONFIGS[self.model, self.seq][0]

    @property
    def model_type(self) -> str:
        return CONFIGS[self.model, self.seq][1]


CONFIGS = {
    ("Llama 3.1 70B", 8192): ("llama-3.1-70b.json", "llama"),
    ("Llama 3.1 8B", 8192): ("llama-3.1-8b-8k.json", "llama"),
    ("Llama 3.1 8B", 4096): ("llama-3.1-8b-4k.json", "llama"),
    ("Mistral 7B v0.1", 8192): ("mistral-7b-v0.1.json", "mistral"),
    ("FLUX.1-dev", None): ("flux.1-dev.json", "flux"),
}
TABLES = {
    "MI300X": [
        Row("Llama 3.1 70B", "bf16", 8192, 4, 426.79),
        Row("Llama 3.1 8B", "bf16", 8192, 3, 542.94),
        Row("Llama 3.1 8B", "fp8", 8192, 3, 737.40),
        Row("Llama 3.1 8B", "bf16", 4096, 6, 523.79),
        Row("Llama 3.1 8B", "fp8", 4096, 6, 735.44),
        Row("Mistral 7B v0.1", "bf16", 8192, 3, 483.17),
        Row("Mistral 7B v0.1", "fp8", 8192, 4, 723.30),
        Row("FLUX.1-dev", "bf16", None, 10, 4.51, "FPS/GPU"),
    ],
    "MI325X": [
        Row("Llama 3.1 70B", "bf16", 8192, 7, 526.13),
        Row("Llama 3.1 8B", "bf16", 8192, 3, 643.01),
        Row("Llama 3.1 8B", "fp8", 8192, 5, 893.68),
        Row("Llama 3.1 8B", "bf16", 4096, 8, 625.96),
        Row("Llama 3.1 8B", "fp8", 4096, 10, 894.98),
        Row("Mistral 7B v0.1", "bf16", 8192, 5, 590.23),
        Row("Mistral 7B v0.1", "fp8", 8192, 6, 860.39),
    ],
}
# (name fragment, peak dense BF16 TFLOP/s from the vendors' data sheets, memory GB): for "closest"
GPUS = [
    ("MI300X", 1307, 192),
    ("MI325X", 1307, 256),
    ("MI355X", 2500, 288),
    ("H100", 989, 80),
    ("H200", 989, 141),
    ("B200", 2250, 180),
    ("B300", 2250, 288),
    ("A100", 312, 80),
]


def reference_gpu(device_name: str, memory_gib: float | None) -> tuple[str, str]:
    """(the GPU of AMD's tables to compare with, why): the detected one if the tables have it, else the
    closest (log distance of peak BF16 rate plus of memory; memory alone for a GPU not listed here)."""
    for gpu in TABLES:
        if gpu in device_name.replace(" ", ""):
            return gpu, f"{gpu}, the GPU detected"
    if memory_gib is None:
        return "MI300X", "MI300X, the table used without a GPU; --gpu picks another"
    known = next(((peak, mem) for frag, peak, mem in GPUS if frag in device_name.replace(" ", "")), None)

    def distance(gpu: str) -> float:
        _, peak, mem = next(g for g in GPUS if g[0] == gpu)
        d = abs(math.log(memory_gib / mem))
        return d + (abs(math.log(known[0] / peak)) if known else 0.0)

    best = min(TABLES, key=distance)
    basis = "peak BF16 rate and memory" if known else "memory (GPU not in our list)"
    return best, f"{best}, the closest by {basis} to this {device_name}"


def lookup(gpu: str, model: str, precision: str, seq: int | None) -> Row | None:
    return next((r for r in TABLES[gpu] if (r.model, r.precision, r.seq) == (model, precision, seq)), None)
