"""4-bit matmuls for the Llama transformer blocks, the MLPerf v6.0 submissions' recipes, applied by one
function beside FP8's:

    fp4 = apply_fp4(model, Fp4Settings(recipe=Fp4Recipe("mxfp4", mxfp4_hadamard=True), healing_iter=340))

It swaps the blocks' linear layers for `Fp4Linear`s (native FP8 linears that compute in MXFP4 or NVFP4 until
healed: `linear`) and returns an `Fp4`, the `training.fp8.Fp8` record the step already takes, with what
the run needs besides: `heal()` (FP4 to FP8 delayed scaling, HEALING_ITER / HEALING_PRECISION=FP8_DS),
`fp8_for_warmup()` (WARMUP_RECIPE=fp8_hybrid) and `linear_precision` (what the log discloses as
`lowest_numerical_precision_in_linear`). The formats are in `formats`, the GEMMs in `gemm` (emulated
everywhere, PyTorch's block-scaled FP4 GEMM on sm100). Models import nothing from here.

The recipes, as published (MLPerf Training v6.0 results, Llama 2 70B LoRA and Llama 3.1 8B):
- AMD (Primus on MI350X / MI355X): FP4=True FP4_RECIPE=mxfp4 with NVTE_MXFP4_USE_HADAMARD=1 (the config
  scripts; Primus passes them to ROCm Transformer Engine's `MXFP4BlockScaling`); LoRA heals at
  HEALING_ITER=340 with HEALING_PRECISION=FP8_DS; the 8B trains MXFP4 throughout after an FP8 synthetic
  warm-up (WARMUP_RECIPE=fp8_hybrid, its `conf/llama3.1_8B-pretrain-fp4.yaml`: fp4 true, fp4_recipe mxfp4).
- NVIDIA (NeMo 26.04 on B200 / B300 / GB300, `config_common_fp4.sh`): FP4=True FP8=False FP4_RECIPE=nvfp4,
  NVTE_NVFP4_DISABLE_RHT=1 and NVTE_NVFP4_DISABLE_2D_QUANTIZATION=1 (stochastic rounding stays on: its
  disabling line is commented out), HEALING_PRECISION=FP8_DS, LoRA HEALING_ITER=350. Its healing callback
  (`callback_nvfp4.py`, `NVFP4Callback.on_train_step_end`) swaps the recipe for Transformer Engine's
  `DelayedScaling` (the FP8 amax settings of the run) once `train_state.step + 1 == healing_iter`; here
  the first HEALING_ITER optimizer steps run in 4 bits, the rest in FP8.
At the switch the FP8 linears' scales are measured on the next step's batch (`training.fp8.calibrate`),
as at the start of any native FP8 run here.
"""

from training.fp4.apply import (
    EMULATED,
    HEALING_PRECISIONS,
    MXFP4,
    NVFP4,
    RECIPES,
    WARMUP_RECIPES,
    Fp4,
    Fp4Linear,
    Fp4Recipe,
    Fp4Settings,
    apply_fp4,
    choose_kernel,
    describe_kernel,
)

__all__ = [
    "EMULATED",
    "Fp4",
    "Fp4Linear",
    "Fp4Recipe",
    "Fp4Settings",
    "HEALING_PRECISIONS",
    "MXFP4",
    "NVFP4",
    "RECIPES",
    "WARMUP_RECIPES",
    "apply_fp4",
    "choose_kernel",
    "describe_kernel",
]
