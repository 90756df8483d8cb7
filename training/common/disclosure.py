"""The disclosure keys of MLPerf Training 6.x: the lowest numerical precision of a run's linear layers, its
attention and its collectives, its tensor, pipeline, context and expert parallelism, its micro-batch size
and the config file it was started from. Optional in 6.0, required once each from 6.1 on
(`compliance_checker/training_6.1.0/common.yaml`). Each trainer fills them from what its build did, never
from what the config asked for, and the shared loop logs them (`MLPerfRun.log_disclosure`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

# The rules' precision names, by the bits of one element: the lowest of several is the one with fewest.
BITS = {"mxfp4": 4, "nvfp4": 4, "mxfp6": 6, "fp8": 8, "bfloat16": 16, "fp16": 16, "tf32": 19, "fp32": 32}
_DTYPES = {
    torch.float32: "fp32",
    torch.bfloat16: "bfloat16",
    torch.float16: "fp16",
    torch.float8_e4m3fn: "fp8",
    torch.float8_e5m2: "fp8",
}
# Our PRECISION values, resolved by the build, and what the linear layers' GEMMs then read.
PRECISION_NAMES = {"fp32": "fp32", "bf16": "bfloat16", "fp8": "fp8"}


def dtype_name(dtype: torch.dtype) -> str:
    """The rules' name of a torch dtype."""
    if dtype not in _DTYPES:
        raise ValueError(f"{dtype} has no MLPerf precision name")
    return _DTYPES[dtype]


def lowest(*names: str) -> str:
    """The precision of fewest bits among `names` (rules' names)."""
    unknown = [n for n in names if n not in BITS]
    if unknown or not names:
        raise ValueError(f"not MLPerf precision names: {unknown or 'none given'}")
    return min(names, key=BITS.__getitem__)


@dataclass(frozen=True)
class Disclosure:
    """A run's disclosure, as built."""

    linear: str  # the lowest precision any linear layer's GEMM reads
    attn: str  # the precision attention's matrix products read
    comm: str  # the lowest precision a collective carries; a single process: its gradients' precision
    micro_batch_size: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1

    def __post_init__(self):
        lowest(self.linear, self.attn, self.comm)  # each a name the rules know

    def keys(self, config_file: Path | str | None) -> dict[str, object]:
        """The eight keys and their values; `config_file` is the file the run's config was sourced from."""
        return {
            "lowest_numerical_precision_in_linear": self.linear,
            "lowest_numerical_precision_in_attn": self.attn,
            "lowest_numerical_precision_in_comm": self.comm,
            "tensor_parallelism": self.tp,
            "pipeline_parallelism": self.pp,
            "context_parallelism": self.cp,
            "expert_parallelism": self.ep,
            "micro_batch_size": self.micro_batch_size,
            "config_filename": Path(config_file).name
            if config_file
            else "none (settings from the environment)",
        }
