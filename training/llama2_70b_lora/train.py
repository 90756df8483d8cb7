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

import math
import random
import sys
import time
from contextlib import nullcontext

import torch

from training.common import backends, dist, outcome
from training.common.config import config_from_environment, write_effective_config
from training.common.mllog import MLLogger, constants
from training.llama import optim, parallel
from training.llama.model import compiled_cross_entropy, cross_entropy
from training.llama.step import Step, evaluate_batches, train_step, warm_up
from training.llama2_70b_lora import data
from training.llama2_70b_lora.config import ADAMW_BETAS, ADAMW_EPS, BENCHMARK, LR_SCHEDULE, LoraConfig
from training.llama2_70b_lora.model import build_model, is_llama2_70b, model_shape


def main() -> outcome.Outcome:
    cfg = config_from_environment(LoraConfig, __doc__)
    info = dist.init_distributed()
    par = cfg.parallelism(info.world_size)
    gbs = cfg.global_batch_size(info.world_size)
    seed = dist.broadcast_int(
        cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(2**31), info.device
    )
    shape, paths = model_shape(cfg), cfg.paths()

    mllog = MLLogger(info.rank)
    mllog.event(constants.CACHE_CLEAR, cfg.clear_caches)
    mllog.start(constants.INIT_START)
    mllog.submission(BENCHMARK.name, cfg.org, cfg.platform, cfg.num_nodes)
    mllog.event(constants.SEED, seed)
    dist.seed_everything(seed)
    train_rows = data.load_rows(paths["train"], cfg.seq_length, shape.vocab_size)
    valid_rows = data.load_rows(paths["valid"], cfg.seq_length, shape.vocab_size)
    log_hyperparameters(mllog, cfg, par, gbs, len(train_rows), len(valid_rows), is_llama2_70b(shape))

    precision = backends.choose_precision(cfg.requested_precision())
    on_gpu = info.device.type == "cuda"
    mesh = parallel.build_mesh(info.device.type, par.dp, 1)
    model, fp8, chosen = build_model(cfg, par, mesh, info.device, precision)
    optimizer, impl = optim.build_optimizer(
        model, cfg.lr, ADAMW_BETAS, ADAMW_EPS, cfg.weight_decay, fused=on_gpu, impl=cfg.adamw_impl
    )
    chosen = {"platform": backends.platform_name(), "precision": precision, **chosen,
              "optimizer": f"AdamW ({impl}), the adapters only"}  # fmt: skip
    for key, value in chosen.items():
        mllog.event(f"backend_{key}", value)
        if info.is_main:
            print(f"lora: {key}: {value}", flush=True)
    bf16_autocast = precision in ("bf16", "fp8") and chosen["data_parallel"] == "off"
    step = Step(
        model, optimizer, par, info.device, mesh,
        loss_fn=compiled_cross_entropy if cfg.compile else cross_entropy,
        autocast=torch.autocast(info.device.type, torch.bfloat16) if bf16_autocast else nullcontext(),
        fp8=fp8, clip_norm=cfg.clip_norm,
    )  # fmt: skip
    adapters = sum(p.numel() for p in step.params)
    flops_per_token = shape.lora_flops_per_token(cfg.seq_length, adapters)
    if cfg.logdir and cfg.run_tag and info.is_main:
        extra = {"seed": seed, "global_batch_size": gbs, "parallelism": vars(par), "backends": chosen,
                 "deviations": cfg.deviations(is_llama2_70b(shape)), "model_shape": str(shape),
                 "trainable_parameters": adapters, "model_flops_per_token": flops_per_token,
                 "versions": backends.versions(), "available": backends.available()}  # fmt: skip
        write_effective_config(cfg, cfg.logdir / f"{cfg.run_tag}.config.json", extra)
    if cfg.warmup:
        warm_up(step, cfg.warmup_train_steps, cfg.micro_batch_size, cfg.seq_length, shape.vocab_size)
    sampler = data.Sampler(len(train_rows), gbs, cfg.minibs, cfg.micro_batch_size, info.rank, seed)
    first_eval, eval_every = cfg.eval_steps(info.world_size)
    dist.barrier()
    mllog.end(constants.INIT_STOP)

    # ---- timed region ----
    mllog.start(constants.RUN_START)
    mllog.start(constants.BLOCK_START, metadata={"samples_count": 0})
    status, step_count, samples, next_eval, in_block = constants.ABORTED, 0, 0, first_eval, True
    val_loss, diverged = math.nan, ""
    window_start, window_samples = time.perf_counter(), 0
    finite = torch.ones((), dtype=torch.bool, device=info.device)
    validation = None
    while step_count < cfg.max_steps:
        lr = optim.cosine_with_warmup(step_count, cfg.lr, 0, cfg.max_steps, 0.0)
        micro = [data.micro_batch(train_rows, rows) for rows in sampler.step(step_count)]
        loss, grad_norm = train_step(step, micro, lr)
        step_count += 1
        samples += gbs
        window_samples += gbs
        finite &= torch.isfinite(loss)
        if step_count % cfg.log_freq == 0 or step_count in (next_eval, cfg.max_steps):
            if dist.any_rank(~finite):
                diverged = f"non-finite loss by step {step_count}"
                print(f"lora: {diverged}; ending the run as aborted", file=sys.stderr)
                break
            if info.is_main and step_count % cfg.log_freq == 0:
                print(f"step {step_count} samples {samples} loss {loss.item():.4f} lr {lr:.3e} "
                      f"grad_norm {grad_norm.item():.4f}", flush=True)  # fmt: skip
        if step_count != next_eval:
            continue
        if on_gpu:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - window_start
        tokens_per_gpu = window_samples * cfg.seq_length / seconds / info.world_size
        stats = {"throughput": window_samples / seconds, "tokens_per_s_per_gpu": tokens_per_gpu,
                 "model_tflops_per_gpu": tokens_per_gpu * flops_per_token / 1e12, "train_loss": loss.item(),
                 "lr": lr}  # fmt: skip
        mllog.event("tracked_stats", stats, metadata={"samples_count": samples, "step": step_count})
        mllog.end(constants.BLOCK_STOP, metadata={"samples_count": samples})
        in_block = False
        mllog.start(constants.EVAL_START, metadata={"samples_count": samples})
        if validation is None:
            validation = data.eval_batches(valid_rows, info.rank, info.world_size)
        batches, rounds = validation
        val_loss = evaluate_batches(step, batches, rounds, data.micro_batch(valid_rows, [0]))
        mllog.event(constants.EVAL_ACCURACY, val_loss, metadata={"samples_count": samples})
        mllog.end(constants.EVAL_STOP, metadata={"samples_count": samples})
        if info.is_main:
            print(f"eval at {samples} samples: loss {val_loss:.4f} (target {cfg.target})", flush=True)
        if val_loss <= cfg.target:
            status = constants.SUCCESS
            break
        if not math.isfinite(val_loss):
            diverged = f"non-finite validation loss at {samples} samples"
            break
        next_eval += eval_every
        if step_count < cfg.max_steps:
            mllog.start(constants.BLOCK_START, metadata={"samples_count": samples})
            in_block, window_start, window_samples = True, time.perf_counter(), 0
    if in_block:
        mllog.end(constants.BLOCK_STOP, metadata={"samples_count": samples})
    mllog.end(constants.RUN_STOP, metadata={"samples_count": samples, "status": status})
    dist.shutdown()
    progress = f"eval loss {val_loss:.4f} (target {cfg.target}) after {samples} samples"
    return outcome.ended(status == constants.SUCCESS, progress, diverged)


def log_hyperparameters(
    mllog: MLLogger, cfg: LoraConfig, par: parallel.Parallelism, gbs: int, train: int, valid: int,
    official_model: bool,
) -> None:  # fmt: skip
    """Every key closed_llama2_70b_lora.yaml (5.1.0) requires, with the sizes AMD and NVIDIA log
    (`train_samples`, `eval_samples`: the rows of each file), the optimizer's fixed values and the target."""
    mllog.hyperparameters({
        constants.GLOBAL_BATCH_SIZE: gbs,
        constants.GRADIENT_ACCUMULATION_STEPS: par.grad_accum,
        constants.TRAIN_SAMPLES: train,
        constants.EVAL_SAMPLES: valid,
        constants.MAX_SEQUENCE_LENGTH: cfg.seq_length,
        constants.OPT_NAME: "adamw",
        constants.OPT_BASE_LR: cfg.lr,
        constants.OPT_LR_WARMUP_FACTOR: 0.0,
        constants.OPT_LR_TRAINING_STEPS: cfg.max_steps,
        constants.OPT_LR_DECAY_SCHEDULE: LR_SCHEDULE,
        constants.OPT_ADAMW_BETA_1: ADAMW_BETAS[0],
        constants.OPT_ADAMW_BETA_2: ADAMW_BETAS[1],
        constants.OPT_ADAMW_EPSILON: ADAMW_EPS,
        constants.OPT_ADAMW_WEIGHT_DECAY: cfg.weight_decay,
        constants.OPT_GRADIENT_CLIP_NORM: cfg.clip_norm,
        constants.LORA_ALPHA: cfg.lora_alpha,
        "lora_rank": cfg.lora_rank,
        "lora_dropout": cfg.lora_dropout,
        "target_accuracy": cfg.target,
        "micro_batch_size": cfg.micro_batch_size,
    })  # fmt: skip
    deviations = cfg.deviations(official_model)
    if deviations:
        print(f"lora: {', '.join(deviations)}: this run is NOT a valid MLPerf result", file=sys.stderr)


if __name__ == "__main__":
    outcome.run(main, "lora")
