"""The Flux.1 run's settings, read once from the sourced config.

Names are AMD's v6.0 flux1 names (`BATCHSIZE` the global batch, `MBS`, `LEARNING_RATE`, `WARMUP_STEPS`,
`MAX_STEPS`, `TARGET_ACCURACY`, `COMPILE_DIT`); `GBS`, `LR` and `TARGET` are accepted as aliases. What the
MLPerf rules fix (AdamW betas, epsilon and decay, clip norm 1.0, the evaluation every 262,144 samples on
the 29,696 COCO samples, the target 0.586, the constant LR after a linear warm-up) is fixed here; the demo
knobs (model size, eval size and interval, target) are variables, and a run that changes them is logged as
not a valid MLPerf result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from training import benchmarks
from training.common.config import ConfigError, RunSettings, var
from training.common.mlperf_loop import Schedule
from training.flux1.model import PRESETS, FluxShape

BENCHMARK = benchmarks.BENCHMARKS["flux1"]
# Fixed by the MLPerf Training closed rules (closed_flux1.yaml, the reference's README and config)
OFFICIAL = {"target": BENCHMARK.target, "eval_every": 262_144, "eval_samples": 29_696}
TRAIN_SAMPLES = 1_099_776  # the CC12M subset (the reference logs it as train_samples)
ADAMW_BETAS = (0.9, 0.95)
ADAMW_EPS = 1e-8
WEIGHT_DECAY = 0.1  # on every parameter, as torchtitan's AdamW
GRAD_CLIP_NORM = 1.0
LR_SCHEDULE = "linear warm-up, then constant"
# The reference config's training.steps: where a run that never reaches the target stops (AMD: MAX_STEPS=-1)
REFERENCE_MAX_STEPS = 30_000


@dataclass(frozen=True, kw_only=True)
class FluxConfig(RunSettings):
    PRECISIONS = ("auto", "fp32", "bf16", "fp8")
    BATCH_VAR = "MBS"  # config_<SYSTEM>_<NODES>x<GPUS>x<MBS>
    BENCHMARK = BENCHMARK

    datadir: Path = var("DATADIR", help="cc12m_preprocessed/, coco_preprocessed/, empty_encodings/")
    train_dir: Path | None = var("TRAIN_DATA", None, help="default DATADIR/cc12m_preprocessed")
    val_dir: Path | None = var("VAL_DATA", None, help="default DATADIR/coco_preprocessed")
    empty_dir: Path | None = var("EMPTY_ENCODINGS", None, help="default DATADIR/empty_encodings")
    gbs: int = var("BATCHSIZE", help="images per optimizer step (AMD's name)", aliases=("GBS",), bounds="> 0")
    micro_batch_size: int = var(
        "MBS", help="images per GPU per forward", aliases=("MICRO_BATCH_SIZE",), bounds="> 0"
    )
    lr: float = var("LEARNING_RATE", help="the LR after the warm-up", aliases=("LR",), bounds="> 0")
    warmup_steps: int = var("WARMUP_STEPS", 0, help="linear warm-up, optimizer steps", bounds=">= 0")
    max_steps: int = var(
        "MAX_STEPS",
        -1,
        help=f"the step limit; -1 (AMD's): the reference config's {REFERENCE_MAX_STEPS}",
        bounds=">= -1",
    )
    eval_every: int = var(
        "EVAL_EVERY", OFFICIAL["eval_every"], help="samples between evaluations", bounds="> 0"
    )
    eval_samples: int = var(
        "EVAL_SAMPLES", OFFICIAL["eval_samples"], help="the first N COCO rows", bounds="> 0"
    )
    eval_batch_size: int | None = var(
        "EVAL_MBS", None, help="validation images per GPU per forward (MBS)", bounds="> 0"
    )
    target: float = var(
        "TARGET_ACCURACY",
        OFFICIAL["target"],
        help="validation loss to reach",
        aliases=("TARGET",),
        bounds="> 0",
    )
    model_size: str = var("MODEL_SIZE", "schnell", help="preset: " + " | ".join(PRESETS))
    double_layers: int | None = var("NUM_DOUBLE_LAYERS", None, help="override the preset", bounds="> 0")
    single_layers: int | None = var("NUM_SINGLE_LAYERS", None, help="override the preset", bounds=">= 0")
    activation_checkpointing: bool = var(
        "ACTIVATION_CHECKPOINTING", False, help="recompute every block in the backward (the reference: full)"
    )
    compile: bool = var(
        "COMPILE_DIT", False, help="torch.compile each block (AMD's name)", aliases=("COMPILE",)
    )
    fp8_recipe: str | None = var(
        "FP8_RECIPE",
        None,
        help="AMD's name: delayed is PRECISION=fp8 (FP8 GEMMs with delayed scaling; FP8_BACKEND picks whose)",
    )

    def __post_init__(self):
        problems = self.shared_problems()
        if self.model_size not in PRESETS:
            problems.append(f"MODEL_SIZE={self.model_size!r} is not one of {', '.join(PRESETS)}")
        if self.fp8_recipe not in (None, "delayed"):
            problems.append(f"FP8_RECIPE={self.fp8_recipe!r}: AMD's flux1 recipe is delayed (or unset)")
        elif self.fp8_recipe and self.precision not in ("auto", "bf16", "fp8"):
            problems.append(
                f"FP8_RECIPE={self.fp8_recipe} (FP8 GEMMs) contradicts PRECISION={self.precision}"
            )
        if problems:
            raise ConfigError("; ".join(problems))

    # ---- derived values ----

    def model_shape(self, data_shapes: dict[str, tuple[int, ...]] | None = None) -> FluxShape:
        """The preset with the overrides; the input widths from the data's tensors when given."""
        shape = PRESETS[self.model_size].replace(
            double_layers=self.double_layers, single_layers=self.single_layers
        )
        if data_shapes:
            shape = shape.replace(
                text_width=data_shapes["t5_encodings"][-1],
                pooled_width=data_shapes["clip_encodings"][-1],
                latent_channels=data_shapes["mean"][0],
            )
        return shape

    def grad_accum(self, world_size: int) -> int:
        """Micro-batches per rank per optimizer step (ConfigError where BATCHSIZE does not split)."""
        per_step = self.micro_batch_size * world_size
        if self.gbs % per_step:
            raise ConfigError(
                f"BATCHSIZE={self.gbs} is not a multiple of MBS={self.micro_batch_size} x {world_size} ranks"
            )
        return self.gbs // per_step

    def step_limit(self) -> int:
        return REFERENCE_MAX_STEPS if self.max_steps == -1 else self.max_steps

    def eval_interval_steps(self) -> int:
        """Steps between evaluations: ceil(EVAL_EVERY / BATCHSIZE), as the reference's eval_freq_steps."""
        return math.ceil(self.eval_every / self.gbs)

    def evaluation_frequency(self) -> int:
        """Samples between evaluations as run (the 6.x rules' ceil(262144 / GBS) x GBS)."""
        return self.eval_interval_steps() * self.gbs

    def schedule(self) -> Schedule:
        every, last = self.eval_interval_steps(), self.step_limit()
        return Schedule(self.gbs, last, range(every, last + 1, every), self.log_freq)

    def no_evaluation(self, world_size: int) -> str | None:
        if self.schedule().evaluates():
            return None
        return (
            f"no evaluation scheduled: flux1 evaluates every ceil(EVAL_EVERY / BATCHSIZE) = "
            f"{self.eval_interval_steps()} steps, past MAX_STEPS={self.step_limit()}: set MAX_STEPS >= "
            f"{self.eval_interval_steps()} or EVAL_EVERY <= {self.step_limit() * self.gbs}"
        )

    def requested_precision(self) -> str:
        """PRECISION, with NVIDIA's FP8=1 and AMD's FP8_RECIPE=delayed folded in."""
        return "fp8" if self.fp8_recipe == "delayed" else super().requested_precision()

    def fp8_settings(self):
        """The FP8 backend and scaling the shared variables ask for (PRECISION=fp8)."""
        from training.fp8 import Fp8Settings

        return Fp8Settings(
            backend=self.fp8_backend,
            casts=self.fp8_casts,
            amax_history=self.fp8_amax_history,
            amax_algo=self.fp8_amax_algo,
            fast_accum=self.fp8_fast_accum,
        )

    def deviations(self) -> list[str]:
        """Settings that make this run something other than the MLPerf benchmark."""
        out = [
            f"{name.upper()}={getattr(self, name)} (MLPerf: {value})"
            for name, value in OFFICIAL.items()
            if getattr(self, name) != value
        ]
        if self.model_shape() != PRESETS["schnell"]:
            out.append(f"MODEL_SIZE={self.model_size} with overrides (MLPerf: Flux.1-schnell)")
        if self.is_cpu_demo:
            out.append("CPU_DEMO=1")
        return out

    def paths(self) -> dict[str, Path]:
        from training.flux1.data import EMPTY, TRAIN, VALID

        return {
            "train": self.train_dir or self.datadir / TRAIN,
            "valid": self.val_dir or self.datadir / VALID,
            "empty": self.empty_dir or self.datadir / EMPTY,
        }
