"""Flux.1 text-to-image pretraining on CC12M embeddings, MLPerf Training rules:
`torchrun -m training.flux1.train`.

Setup: the data is opened (memory-mapped) and its tensor shapes read before `init_start`; the transformer is
built, initialized from the seed and wrapped between init_start and init_stop. The timed run trains from
random weights (the rectified-flow step of `step.py`, LR warm-up then constant), evaluates the validation loss
on the COCO set every ceil(262,144 / BATCHSIZE) steps, and stops at TARGET_ACCURACY (`success`) or after
MAX_STEPS (`aborted`). A non-finite loss also ends the run `aborted`. How the run ended goes to
LOGDIR/<RUN_TAG>.outcome.json and its exit status (training.common.outcome): 0 success, 1 aborted or
crashed, 2 config, data or disk error.
"""

from __future__ import annotations

import sys

import torch

from training.common import backends, dist, outcome
from training.common.config import ConfigError, config_from_environment
from training.common.disclosure import Disclosure
from training.common.mllog import MLLogger, constants
from training.common.mlperf_loop import MLPerfRun, StepResult
from training.flux1 import data
from training.flux1.build import Features, Optim, build_step, resolve_precision
from training.flux1.config import (
    ADAMW_BETAS,
    ADAMW_EPS,
    BENCHMARK,
    GRAD_CLIP_NORM,
    LR_SCHEDULE,
    TRAIN_SAMPLES,
    WEIGHT_DECAY,
    FluxConfig,
)
from training.flux1.step import Batch, calibrate_fp8, evaluate, lr_at, train_step


def main() -> outcome.Outcome:
    cfg = config_from_environment(FluxConfig, __doc__)
    info = dist.init_distributed()
    accum = cfg.grad_accum(info.world_size)
    seed = dist.run_seed(cfg.seed, info.device)
    paths = cfg.paths()
    try:  # untimed, before init_start: open the splits, read the tensors' shapes
        train_set, valid_set = data.EncodedImages(paths["train"]), data.EncodedImages(paths["valid"])
        empty = data.load_empty_encodings(paths["empty"])
        eval_batch = cfg.eval_batch_size or cfg.micro_batch_size
        validation = data.ValidationSet(valid_set, cfg.eval_samples, eval_batch, info.world_size, info.rank)
        shape = cfg.model_shape(train_set.sample_shapes())
    except data.DataError as err:
        raise ConfigError(str(err)) from None
    run = MLPerfRun(BENCHMARK, cfg, info, seed, "flux1")
    log_hyperparameters(run.mllog, cfg, accum, len(train_set))

    precision = resolve_precision(cfg.requested_precision(), info.device)
    features = Features(precision, cfg.activation_checkpointing, cfg.compile, cfg.fp8_settings())
    optim = Optim(cfg.lr, ADAMW_BETAS, ADAMW_EPS, WEIGHT_DECAY, GRAD_CLIP_NORM)
    step, applied = build_step(shape, features, optim, info, seed)
    chosen = {
        "platform": backends.platform_name(),
        "precision": precision,
        "attention": "SDPA (diffusers' FluxAttnProcessor)",
        **applied,
    }
    run.log_backends(chosen)
    calibrate_fp8(step, synthetic_batch(train_set.sample_shapes(), cfg.micro_batch_size))
    run.log_disclosure(disclosure(precision, info.world_size, cfg.micro_batch_size))
    run.write_config(
        {
            "world_size": info.world_size,
            "gradient_accumulation_steps": accum,
            "backends": chosen,
            "deviations": cfg.deviations(),
            "model_shape": str(shape),
        }
    )

    def start_training():
        stream = data.TrainStream(train_set, empty, cfg.micro_batch_size, info.world_size, info.rank, seed)

        def one_step(index: int) -> StepResult:
            lr = lr_at(index, cfg.lr, cfg.warmup_steps)
            loss, grad_norm = train_step(step, [next(stream) for _ in range(accum)], lr)
            return StepResult(loss, lr, grad_norm)

        return one_step

    return run.train(
        cfg.schedule(),
        start_training,
        lambda: evaluate(step, validation),
        cfg.target,
        metric="validation loss",
    )


def synthetic_batch(shapes: dict[str, tuple[int, ...]], micro_batch: int) -> Batch:
    """Random inputs of the data's shapes (FP8's calibration before the clock starts reads no data)."""
    g = torch.Generator().manual_seed(0)
    t5, clip, mean, logvar = (torch.randn(micro_batch, *shapes[c], generator=g) for c in data.COLUMNS)
    return Batch(t5, clip, mean, logvar - 6)


def disclosure(precision: str, world_size: int, micro_batch_size: int) -> Disclosure:
    """The 6.x disclosure as built: the blocks' GEMMs in FP8 where PRECISION is fp8, every other GEMM and
    attention's products in the compute precision; over several ranks FSDP2 gathers the parameters in it
    (the gradients are reduced in fp32), in one process the gradients are the fp32 parameters'; one data-
    parallel dimension only."""
    name = "fp32" if precision == "fp32" else "bfloat16"
    comm = name if world_size > 1 else "fp32"
    linear = "fp8" if precision == "fp8" else name
    return Disclosure(linear=linear, attn=name, comm=comm, micro_batch_size=micro_batch_size)


def log_hyperparameters(mllog: MLLogger, cfg: FluxConfig, accum: int, train_rows: int) -> None:
    """Every key closed_flux1.yaml (6.0.0, 6.1.0) requires, with the values the rules fix, and what the
    reference logs besides (train_samples: the training set's size; eval_samples), plus the target (read by
    our scorer)."""
    mllog.hyperparameters(
        {
            constants.GLOBAL_BATCH_SIZE: cfg.gbs,
            constants.GRADIENT_ACCUMULATION_STEPS: accum,
            "evaluation_frequency": cfg.evaluation_frequency(),
            constants.TRAIN_SAMPLES: train_rows,
            constants.EVAL_SAMPLES: cfg.eval_samples,
            constants.OPT_NAME: constants.ADAMW,
            constants.OPT_BASE_LR: cfg.lr,
            constants.OPT_LR_WARMUP_STEPS: cfg.warmup_steps,
            constants.OPT_ADAMW_BETA_1: ADAMW_BETAS[0],
            constants.OPT_ADAMW_BETA_2: ADAMW_BETAS[1],
            constants.OPT_ADAMW_EPSILON: ADAMW_EPS,
            constants.OPT_ADAMW_WEIGHT_DECAY: WEIGHT_DECAY,
            constants.OPT_GRADIENT_CLIP_NORM: GRAD_CLIP_NORM,
            constants.OPT_LR_DECAY_SCHEDULE: LR_SCHEDULE,
            constants.MAX_STEPS: cfg.step_limit(),
            "target_accuracy": cfg.target,
        }
    )
    deviations = cfg.deviations()
    if train_rows != TRAIN_SAMPLES:
        deviations.append(f"a training set of {train_rows} rows (MLPerf: {TRAIN_SAMPLES})")
    if deviations:
        print(f"flux1: {', '.join(deviations)}: this run is NOT a valid MLPerf result", file=sys.stderr)


if __name__ == "__main__":
    outcome.run(main, "flux1")
