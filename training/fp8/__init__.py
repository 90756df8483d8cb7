"""FP8 matmuls for the transformer blocks of any benchmark, applied by one function:

    fp8 = apply_fp8(model, Fp8Settings(backend="auto", ...))   # or apply_fp8(model, None): off

It swaps the blocks' linear layers (and, for our own backend, whole MLPs) for FP8 ones and returns an `Fp8`
with what the training loop needs (a context around forward, a hook after each weight update) and a line
describing what it did. Backends (`auto`): our own delayed-scaling path where the OCP FP8 formats run
(NVIDIA, MI350-class, CPU; the one measured and curve-checked here), else Transformer Engine where the image
has it (MI300X / MI325X), else torchao's float8 training; or one of them by name (`te` has not run on this
project's GPUs). Ours (`native`) is in `native.py`, its casts in `casts.py` and `kernels.py`,
FSDP2 all-gathers in FP8 in `gather.py`. Models import nothing from here; the benchmark names the MLP layout
to fuse (`MlpLayout`) and passes its settings in.
"""

from training.fp8 import casts, gather, native
from training.fp8.apply import (
    Fp8,
    Fp8Settings,
    MlpLayout,
    amax_description,
    apply_fp8,
    auto_backend,
    backend_problems,
    calibrate,
    choose_backend,
    needs_calibration,
    reset_after_materialize,
    save_mlp_activations_in_fp8,
    store_weights_in_fp8,
)
from training.fp8.gather import store_shards_in_fp8
from training.fp8.native import Fp8Linear, FusedFp8MLP

__all__ = [
    "Fp8",
    "Fp8Linear",
    "Fp8Settings",
    "FusedFp8MLP",
    "MlpLayout",
    "amax_description",
    "apply_fp8",
    "auto_backend",
    "backend_problems",
    "calibrate",
    "casts",
    "choose_backend",
    "gather",
    "native",
    "needs_calibration",
    "reset_after_materialize",
    "save_mlp_activations_in_fp8",
    "store_shards_in_fp8",
    "store_weights_in_fp8",
]
