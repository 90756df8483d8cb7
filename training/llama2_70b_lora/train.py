"""Llama 2 70B LoRA fine-tuning on GovReport, MLPerf Training rules:
`torchrun -m training.llama2_70b_lora.train`.

Setup (between init_start and init_stop, untimed): the rows are read, the model is built with its adapters,
its frozen base read from the Hugging Face checkpoint shard by shard, and (WARMUP) a few synthetic training
and validation passes compile and warm the kernels (no optimizer step; FP8 scaling state reset after). The
timed run fine-tunes the adapters, evaluates the mean loss over the validation rows' scored tokens after
(SKIP_EVALS + 1) x VAL_CHECK_INTERVAL samples and then every VAL_CHECK_INTERVAL samples, and stops at TARGET
(`success`) or after MAX_STEPS (`aborted`); a non-finite loss also ends it `aborted`.
How the run ended goes to LOGDIR/<RUN_TAG>.outcome.json and its exit status (training.common.outcome):
0 success, 1 aborted or crashed, 2 config, data or disk error.
"""

from __future__ import annotations

import functools
import sys

from training.common import backends, dist, outcome
from training.common.config import ConfigError, config_from_environment
from training.common.mllog import MLLogger, constants
from training.common.mlperf_loop import MLPerfRun, StepResult
from training.llama import parallel
from training.llama.build import build_run
from training.llama.step import PRECISION_SWITCH, evaluate_batches, heal_if_due, train_step, warm_up
from training.llama2_70b_lora import data
from training.llama2_70b_lora.config import (
    ADAMW_BETAS,
    ADAMW_EPS,
    BENCHMARK,
    LoraConfig,
    is_llama2_70b,
)


def main() -> outcome.Outcome:
    cfg = config_from_environment(LoraConfig, __doc__)
    info = dist.init_distributed()
    par = cfg.parallelism(info.world_size)
    gbs = cfg.global_batch_size(info.world_size)
    seed = dist.run_seed(cfg.seed, info.device)
    spec, paths = cfg.run_spec(), cfg.paths()
    shape = spec.shape

    run = MLPerfRun(BENCHMARK, cfg, info, seed, "lora")
    dist.seed_everything(seed)
    train_rows = data.load_rows(paths["train"], cfg.seq_length, shape.vocab_size)
    valid_rows = data.load_rows(paths["valid"], cfg.seq_length, shape.vocab_size)
    log_hyperparameters(run.mllog, cfg, par, gbs, len(train_rows), len(valid_rows), is_llama2_70b(shape))

    if par.cp > 1 and data.packed(train_rows):
        raise ConfigError(
            f"{paths['train']}: rows packing several sequences cannot be split over GPUs (context "
            f"parallelism over {par.cp} GPUs here: GBS {gbs} on {info.world_size})"
        )
    mesh = parallel.build_mesh(info.device.type, par.dp, 1, par.cp)
    try:
        _, step, applied = build_run(spec, info.device, mesh, par)
    except ValueError as err:  # a kernel or backend asked for cannot run here; FP8_WEIGHTS on several GPUs
        raise ConfigError(str(err)) from None
    weights = (
        f"{spec.checkpoint} (Hugging Face safetensors, read shard by shard)"
        if spec.checkpoint
        else ("random (INIT_CHECKPOINT=none)")
    )
    chosen = {
        "platform": backends.platform_name(),
        "precision": applied.precision,
        "attention": applied.attention,
        "weights": weights,
        **applied.lines(),
        "optimizer": f"AdamW ({applied.optimizer}), the adapters only",
    }
    run.log_backends(chosen)
    run.log_disclosure(applied.disclosure(par, cfg.micro_batch_size))
    adapters = sum(p.numel() for p in step.params)
    flops_per_token = shape.lora_flops_per_token(cfg.seq_length, adapters)
    run.write_config(
        {
            "global_batch_size": gbs,
            "parallelism": vars(par),
            "backends": chosen,
            "deviations": cfg.deviations(is_llama2_70b(shape)),
            "model_shape": str(shape),
            "trainable_parameters": adapters,
            "model_flops_per_token": flops_per_token,
        }
    )
    if cfg.warmup:
        warm_up(step, cfg.warmup_train_steps, cfg.micro_batch_size, cfg.seq_length, shape.vocab_size)
    dp_rank = info.rank // par.cp  # the ranks of a CP group read the same rows
    sampler = data.Sampler(len(train_rows), gbs, gbs // par.dp, cfg.micro_batch_size, dp_rank, seed)
    validation = functools.cache(lambda: data.eval_batches(valid_rows, info.rank, info.world_size))

    def one_step(index: int) -> StepResult:
        lr = cfg.learning_rate(index)
        micro = [data.micro_batch(train_rows, rows) for rows in sampler.step(index)]
        if switch := heal_if_due(step, index):  # HEALING_ITER: 4 bits to FP8 from this step
            run.mllog.event(PRECISION_SWITCH, switch, metadata={"samples_count": index * gbs})
            run.say(f"step {index + 1}: FP4 healed, the linears compute in FP8 from here")
        loss, grad_norm = train_step(step, micro, lr)
        return StepResult(loss, lr, grad_norm)

    def throughput_per_gpu(samples_per_second: float) -> dict:
        tokens = samples_per_second * cfg.seq_length / info.world_size
        return {"tokens_per_s_per_gpu": tokens, "model_tflops_per_gpu": tokens * flops_per_token / 1e12}

    return run.train(
        cfg.schedule(info.world_size),
        lambda: one_step,  # the rows are in memory already
        lambda: evaluate_batches(step, *validation(), data.micro_batch(valid_rows, [0])),
        cfg.target,
        stats=throughput_per_gpu,
    )


def log_hyperparameters(
    mllog: MLLogger,
    cfg: LoraConfig,
    par: parallel.Parallelism,
    gbs: int,
    train: int,
    valid: int,
    official_model: bool,
) -> None:
    """Every key closed_llama2_70b_lora.yaml (5.1.0) requires, with the sizes AMD and NVIDIA log
    (`train_samples`, `eval_samples`: the rows of each file), the optimizer's fixed values and the target;
    `lora_alpha` a whole number where it is one, as both log it."""
    mllog.hyperparameters(
        {
            constants.GLOBAL_BATCH_SIZE: gbs,
            constants.GRADIENT_ACCUMULATION_STEPS: par.grad_accum,
            constants.TRAIN_SAMPLES: train,
            constants.EVAL_SAMPLES: valid,
            constants.MAX_SEQUENCE_LENGTH: cfg.seq_length,
            constants.OPT_NAME: "adamw",
            constants.OPT_BASE_LR: cfg.lr,
            constants.OPT_LR_WARMUP_FACTOR: cfg.warmup_ratio,
            constants.OPT_LR_TRAINING_STEPS: cfg.max_steps,
            constants.OPT_LR_DECAY_SCHEDULE: cfg.lr_schedule(),
            constants.OPT_ADAMW_BETA_1: ADAMW_BETAS[0],
            constants.OPT_ADAMW_BETA_2: ADAMW_BETAS[1],
            constants.OPT_ADAMW_EPSILON: ADAMW_EPS,
            constants.OPT_ADAMW_WEIGHT_DECAY: cfg.weight_decay,
            constants.OPT_GRADIENT_CLIP_NORM: cfg.clip_norm,
            constants.LORA_ALPHA: int(cfg.lora_alpha)
            if cfg.lora_alpha.is_integer()
            else cfg.lora_alpha,  # 32
            "lora_rank": cfg.lora_rank,
            "lora_dropout": cfg.lora_dropout,
            "target_accuracy": cfg.target,
        }
    )
    deviations = cfg.deviations(official_model)
    if deviations:
        print(f"lora: {', '.join(deviations)}: this run is NOT a valid MLPerf result", file=sys.stderr)


if __name__ == "__main__":
    outcome.run(main, "lora")
