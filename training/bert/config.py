"""The BERT phase-2 run's settings, read once from the sourced config (AMD's and NVIDIA's variable names)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from training import benchmarks
from training.common.config import ConfigError, RunSettings, env_names, var
from training.common.mlperf_loop import Schedule

if TYPE_CHECKING:
    from training.bert.build import RunSpec
    from training.bert.model import BertShape

BENCHMARK = benchmarks.BENCHMARKS["bert"]
OFFICIAL_TARGET = BENCHMARK.target
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
ATTENTION_CHOICES = ("auto", "sdpa", "sdpa_cudnn", "flash_attn", "torch_flash", "cudnn_ragged")
RESIDUAL_DTYPES = ("fp32", "bf16")


@dataclass(frozen=True, kw_only=True)
class BertConfig(RunSettings):
    PRECISIONS = ("auto", "fp32", "bf16", "fp16", "fp8")
    BATCH_VAR = "BATCHSIZE"  # config_<SYSTEM>_<NODES>x<GPUS>x<BATCHSIZE>
    BENCHMARK = BENCHMARK  # its row of the table: the shared checks read its name and ruleset

    datadir: Path = var("DATADIR", help="prepared data: phase1/, hdf5/packed_data, hdf5/eval_varlength")
    batch_size: int = var("BATCHSIZE", help="packed rows per GPU per micro-step", bounds="> 0")
    lr: float = var("LR", help="LAMB base learning rate", bounds="> 0")
    max_steps: int = var("MAX_STEPS", help="length of the LR schedule in optimizer steps", bounds="> 0")
    gradient_steps: int = var("GRADIENT_STEPS", 1, bounds="> 0")
    packing_factor: float = var(
        "PACKING_FACTOR", 2.0, help="average sequences per packed row", bounds="[1, 3]"
    )
    warmup_proportion: float = var("WARMUP_PROPORTION", 0.0, bounds="[0, 1]")
    warmup_steps: int = var("WARMUP_STEPS", 0, bounds=">= 0")
    start_warmup_step: int = var(
        "START_WARMUP_STEP",
        0,
        help="with WARMUP_STEPS: the step the warm-up began at; negative (NVIDIA's 8x8 and 434x8 configs): "
        "the run starts that many steps into it",
        bounds="[-inf, 0]",
    )
    beta1: float = var("OPT_LAMB_BETA_1", 0.9, bounds="[0, 1)")
    beta2: float = var("OPT_LAMB_BETA_2", 0.999, bounds="[0, 1)")
    weight_decay: float = var("WEIGHT_DECAY_RATE", 0.01, bounds=">= 0")
    lamb_epsilon: float = var("OPT_LAMB_EPSILON", 1e-6, bounds="> 0")
    max_grad_norm: float = var("MAX_GRAD_NORM", 1.0, bounds="> 0")
    max_samples_termination: int = var("MAX_SAMPLES_TERMINATION", 4_500_000, bounds="> 0")
    eval_iter_start_samples: int = var("EVAL_ITER_START_SAMPLES", 150_000, bounds=">= 0")
    eval_iter_samples: int = var("EVAL_ITER_SAMPLES", 150_000, bounds="> 0")
    eval_batch_size: int = var("EVAL_BATCH_SIZE", 16, help="eval sequences per GPU per forward", bounds="> 0")
    num_eval_examples: int = var("NUM_EVAL_EXAMPLES", 10_000, bounds="> 0")
    target_accuracy: float = var("TARGET_MLM_ACCURACY", OFFICIAL_TARGET, bounds="(0, 1)")
    max_seq_length: int = var("MAX_SEQ_LENGTH", 512, bounds="> 0")
    max_predictions_per_seq: int = var("MAX_PREDICTIONS_PER_SEQ", 76, bounds="> 0")
    phase: int = var("PHASE", 2, bounds="[1, 2]")
    init_loss_scale: float = var(
        "INIT_LOSS_SCALE", 1024.0, help="PRECISION=fp16: the dynamic loss scale's first value", bounds="> 0"
    )
    bert_config_path: Path | None = var(
        "BERT_CONFIG_PATH", None, help="default DATADIR/phase1/bert_config.json"
    )
    init_checkpoint: str = var(
        "INIT_CHECKPOINT", "phase1", help="'phase1' (the converted checkpoint), a path, or 'none'"
    )
    train_dir: Path | None = var("TRAIN_DIR", None, help="DATADIR/hdf5/packed_data, else DATADIR/packed_data")
    eval_dir: Path | None = var("EVAL_DIR", None, help="default DATADIR/hdf5/eval_varlength")
    attention: str = var("ATTENTION", "auto", help=" | ".join(ATTENTION_CHOICES))
    residual_dtype: str = var(
        "RESIDUAL_DTYPE",
        "fp32",
        help="fp32 | bf16 (PRECISION bf16 or fp8 only): dtype of the residual stream (LayerNorm outputs)",
    )
    compile: bool = var("COMPILE", False, help="torch.compile the model")
    compile_mode: str = var(
        "COMPILE_MODE",
        "default",
        help="COMPILE=1: default | reduce-overhead (adds CUDA graphs) | max-autotune",
    )

    def __post_init__(self):
        problems = self.shared_problems()
        env = env_names(type(self))
        choices = {
            "attention": ATTENTION_CHOICES,
            "residual_dtype": RESIDUAL_DTYPES,
            "compile_mode": COMPILE_MODES,
        }
        problems += [
            f"{env[name]}={getattr(self, name)!r} is not one of {', '.join(allowed)}"
            for name, allowed in choices.items()
            if getattr(self, name) not in allowed
        ]
        if self.residual_dtype == "bf16" and self.requested_precision() in ("fp32", "fp16"):
            problems.append(f"RESIDUAL_DTYPE=bf16 needs PRECISION bf16 or fp8, not {self.precision}")
        if self.phase != 2:
            problems.append(f"PHASE={self.phase}: only phase 2 (the MLPerf benchmark) is implemented")
        if self.attention == "cudnn_ragged" and self.compile and self.compile_mode == "reduce-overhead":
            problems.append(
                "ATTENTION=cudnn_ragged with COMPILE_MODE=reduce-overhead (CUDA graphs): its dropout under a "
                "graph's replay has not passed the check that the backward drops what the forward dropped; "
                "use COMPILE_MODE=default, or ATTENTION=auto"
            )
        if problems:
            raise ConfigError("; ".join(problems))

    # Derived values, named as MLPerf logs them.
    def global_batch_size(self, world_size: int) -> int:
        """Samples per optimizer step as MLPerf counts them: rows x packing factor (NVIDIA/AMD convention)."""
        return round(self.batch_size * self.gradient_steps * world_size * self.packing_factor)

    def scale_problems(self, world_size: int | None = None) -> list[str]:
        """The shared checks (DGXSYSTEM's NxGxB, nodes x GPUs against the launcher); a whole global batch."""
        problems = super().scale_problems(world_size)
        ranks = world_size or self.world_size()
        rows = self.batch_size * self.gradient_steps * ranks * self.packing_factor
        if abs(rows - round(rows)) > 1e-6:
            problems.append(
                f"global batch BATCHSIZE x GRADIENT_STEPS x {ranks} ranks x PACKING_FACTOR = "
                f"{rows:g} samples is not a whole number"
            )
        return problems

    def num_warmup_steps(self) -> int:
        """WARMUP_STEPS, else WARMUP_PROPORTION x MAX_STEPS (truncated, as NVIDIA's run_pretraining.py)."""
        return self.warmup_steps or int(self.warmup_proportion * self.max_steps)

    def warmup_start(self) -> int:
        """The step the warm-up began at: START_WARMUP_STEP with WARMUP_STEPS, else 0 (NVIDIA's
        run_pretraining.py ignores START_WARMUP_STEP when the warm-up is a proportion)."""
        return self.start_warmup_step if self.warmup_steps else 0

    def eval_steps(self, world_size: int) -> list[int]:
        """Optimizer steps after which to evaluate: at EVAL_ITER_START_SAMPLES, then every EVAL_ITER_SAMPLES,
        below MAX_SAMPLES_TERMINATION (NVIDIA's run_pretraining.py: ceil(s / GBS) for s in
        arange(start, MAX_SAMPLES_TERMINATION, every)). A step limit that is not one of them ends the run
        without a last evaluation, as there."""
        gbs = self.global_batch_size(world_size)
        starts = range(self.eval_iter_start_samples, self.max_samples_termination, self.eval_iter_samples)
        return sorted({math.ceil(s / gbs) for s in starts})

    def max_train_steps(self, world_size: int) -> int:
        """The run's last step: MAX_STEPS (the end of the LR schedule, where NVIDIA's loop stops), or the
        step that reaches MAX_SAMPLES_TERMINATION samples if that comes first."""
        return min(
            self.max_steps, math.ceil(self.max_samples_termination / self.global_batch_size(world_size))
        )

    def schedule(self, world_size: int) -> Schedule:
        """The run as the loop runs it: its global batch, last step, evaluations and LOG_FREQ."""
        return Schedule(
            self.global_batch_size(world_size),
            self.max_train_steps(world_size),
            set(self.eval_steps(world_size)),
            self.log_freq,
        )

    def no_evaluation(self, world_size: int) -> str | None:
        schedule = self.schedule(world_size)
        if schedule.evaluates():
            return None
        gbs, start, every = schedule.global_batch, self.eval_iter_start_samples, self.eval_iter_samples
        first = start or every  # the first evaluation after a step (one at 0 samples would come before any)
        latest = min(self.max_samples_termination - 1, schedule.max_steps * gbs)
        limits = [f"MAX_SAMPLES_TERMINATION > {first}"] if first >= self.max_samples_termination else []
        if math.ceil(first / gbs) > self.max_steps:
            limits.append(f"MAX_STEPS >= {math.ceil(first / gbs)}")
        earlier = f"between 1 and {latest}" if start == 0 else f"<= {latest}"
        fixes = [f"EVAL_ITER_START_SAMPLES {earlier}"] if latest > 0 else []
        fixes.append(" and ".join(limits))
        return (
            "no evaluation scheduled: BERT evaluates at EVAL_ITER_START_SAMPLES samples, then every "
            "EVAL_ITER_SAMPLES, below MAX_SAMPLES_TERMINATION (as NVIDIA's run_pretraining.py), until the "
            f"run stops at MAX_STEPS; EVAL_ITER_START_SAMPLES={start}, EVAL_ITER_SAMPLES={every}, "
            f"MAX_SAMPLES_TERMINATION={self.max_samples_termination} (MAX_STEPS={self.max_steps}, {gbs} "
            f"samples a step) give none, so the run could not reach its target: set {', or '.join(fixes)}"
        )

    def run_spec(self, shape: BertShape) -> RunSpec:
        """The run as `build.build_run` builds it, on the model of `shape` (`model_shape()`)."""
        from training.bert.build import LambSettings, RunSpec, fp8_settings

        return RunSpec(
            shape=shape,
            optimizer=LambSettings(
                lr=self.lr,
                betas=(self.beta1, self.beta2),
                eps=self.lamb_epsilon,
                weight_decay=self.weight_decay,
                max_grad_norm=self.max_grad_norm,
            ),
            checkpoint=self.paths()["init_checkpoint"],
            attention=self.attention,
            precision=self.requested_precision(),
            residual_dtype=self.residual_dtype,
            fp8=fp8_settings(
                self.fp8_backend,
                casts=self.fp8_casts,
                amax_history=self.fp8_amax_history,
                amax_algo=self.fp8_amax_algo,
                fast_accum=self.fp8_fast_accum,
            ),
            compile=self.compile,
            compile_mode=self.compile_mode,
            gradient_steps=self.gradient_steps,
            init_loss_scale=self.init_loss_scale,
        )

    def model_shape(self) -> BertShape:
        """The model's shape, from BERT_CONFIG_PATH (default DATADIR/phase1/bert_config.json)."""
        from training.bert.model import BertShape

        return BertShape.from_json(self.paths()["bert_config"])

    def paths(self) -> dict[str, Path | None]:
        from training.bert.data import default_train_dir

        phase1 = self.datadir / "phase1"
        ckpt = {"phase1": phase1 / "model.ckpt-28252.pt", "none": None}.get(self.init_checkpoint)
        return {
            "bert_config": self.bert_config_path or phase1 / "bert_config.json",
            "init_checkpoint": ckpt
            if self.init_checkpoint in ("phase1", "none")
            else Path(self.init_checkpoint),
            "train_dir": self.train_dir or default_train_dir(self.datadir),
            "eval_dir": self.eval_dir or self.datadir / "hdf5" / "eval_varlength",
        }
