"""BERT-Large phase-2 pretraining, MLPerf Training rules: `torchrun -m training.bert.train`.

Setup (untimed, between init_start and init_stop), then the timed run: train on packed rows, evaluate
masked-LM accuracy at the scheduled sample counts, stop at the target (`success`) or at
MAX_SAMPLES_TERMINATION (`aborted`). A NaN/inf loss also ends the run `aborted`. How the run ended (converged,
not converged, diverged, or what it raised) goes to LOGDIR/<RUN_TAG>.outcome.json (training.common.outcome).
"""

from __future__ import annotations

import functools
import math
import random
import sys
import time
from contextlib import ExitStack, nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from training.benchmarks import BENCHMARKS
from training.bert import attention as attention_impls
from training.bert import data
from training.bert.config import OFFICIAL_TARGET, BertConfig
from training.bert.model import (
    BertForPackedPretraining,
    BertShape,
    FeedForward,
    load_pretrained,
    pretraining_loss,
)
from training.bert.optim import Lamb, param_groups, poly_warmup_lr
from training.common import backends, dist, outcome
from training.common.config import ConfigError, config_from_environment, write_effective_config
from training.common.mllog import MLLogger, constants
from training.fp8 import Fp8, Fp8Settings, MlpLayout, apply_fp8, calibrate

BENCHMARK = BENCHMARKS["bert"]


def main() -> outcome.Outcome:
    cfg = config_from_environment(BertConfig, __doc__)
    info = dist.init_distributed()
    mllog = MLLogger(info.rank)
    mllog.event(constants.CACHE_CLEAR, cfg.clear_caches)
    mllog.start(constants.INIT_START)
    mllog.submission(BENCHMARK.name, cfg.org, cfg.platform, cfg.num_nodes)

    seed = dist.broadcast_int(
        cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(2**31), info.device
    )
    mllog.event(constants.SEED, seed)
    dist.seed_everything(seed + info.rank)
    gbs = cfg.global_batch_size(info.world_size)
    log_hyperparameters(mllog, cfg, gbs)

    paths = cfg.paths()
    shape = BertShape.from_json(paths["bert_config"])
    attention = attention_impls.choose_attention(cfg.attention)
    precision = backends.choose_precision(cfg.requested_precision())
    if cfg.residual_dtype == "bf16" and precision not in ("bf16", "fp8"):
        raise ConfigError(f"RESIDUAL_DTYPE=bf16 needs PRECISION bf16 or fp8; PRECISION={cfg.precision} "
                          f"resolved to {precision} here")  # fmt: skip
    model = BertForPackedPretraining(shape, attention)
    model.set_residual_dtype(torch.bfloat16 if cfg.residual_dtype == "bf16" else None)
    if paths["init_checkpoint"] is not None:
        load_pretrained(model, paths["init_checkpoint"])
    model.to(info.device)
    fp8 = apply_fp8(model, fp8_settings(cfg.fp8_backend, casts=cfg.fp8_casts) if precision == "fp8" else None)
    chosen = {"attention": attention, "precision": precision, "fp8": fp8.description,
              "optimizer": "lamb_foreach_compiled" if cfg.compile else "lamb_foreach",
              "data_parallel": "ddp" if info.world_size > 1 else "none",
              "residual_dtype": cfg.residual_dtype,
              "compile": cfg.compile_mode if cfg.compile else "none",
              "loss_scale": f"dynamic from {cfg.init_loss_scale}" if precision == "fp16" else "none",
              "platform": backends.platform_name()}  # fmt: skip
    for key, value in chosen.items():
        mllog.event(f"backend_{key}", value)
    mllog.event(constants.WEIGHTS_INITIALIZATION, str(paths["init_checkpoint"] or "random"))

    optimizer = Lamb(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                     eps=cfg.lamb_epsilon, max_grad_norm=cfg.max_grad_norm, compiled=cfg.compile)  # fmt: skip
    train_model = apply_compile(apply_data_parallel(model, info), cfg.compile, cfg.compile_mode)
    autocast = autocast_context(precision, info.device, fp8)
    if cfg.logdir and cfg.run_tag and info.is_main:
        extra = {"seed": seed, "world_size": info.world_size, "global_batch_size": gbs, "backends": chosen,
                 "versions": backends.versions(), "available": backends.available()}  # fmt: skip
        write_effective_config(cfg, cfg.logdir / f"{cfg.run_tag}.config.json", extra)
    warm_up(
        train_model, optimizer, cfg, autocast, info, loss_scaler(precision, cfg.init_loss_scale, info.device)
    )
    scaler = loss_scaler(precision, cfg.init_loss_scale, info.device)
    eval_steps = set(cfg.eval_steps(info.world_size))
    max_steps = cfg.max_train_steps(info.world_size)
    dist.barrier()
    mllog.end(constants.INIT_STOP)

    # ---- timed region: MLPerf's clock starts before any training data is touched ----
    mllog.start(constants.RUN_START)
    mllog.start(constants.BLOCK_START, metadata={"first_epoch_num": 0, "epoch_count": 1})
    batches = data.Prefetcher(
        data.train_batches(
            data.list_shards(paths["train_dir"]),
            info.rank,
            info.world_size,
            cfg.batch_size,
            cfg.max_seq_length,
            seed,
            static=cfg.compile,
        ),
        info.device,
    )
    eval_set = None
    status, accuracy, step, samples, diverged = constants.ABORTED, 0.0, 0, 0, ""
    window_start, window_samples = time.perf_counter(), 0  # throughput window: training since the last eval
    finite = torch.ones((), dtype=torch.bool, device=info.device)
    while step < max_steps:
        for lr_group in optimizer.param_groups:
            lr_group["lr"] = poly_warmup_lr(
                step, cfg.lr, cfg.max_steps, cfg.num_warmup_steps(), cfg.start_warmup_step
            )
        loss = train_step(train_model, optimizer, batches, cfg.gradient_steps, autocast, info, scaler)
        finite &= torch.isfinite(loss)
        step += 1
        samples += gbs
        window_samples += gbs
        if step % cfg.log_freq == 0 or step in eval_steps or step == max_steps:
            if dist.any_rank(~finite):
                diverged = f"non-finite loss at step {step}"
                print(f"bert: {diverged}; ending the run as aborted", file=sys.stderr)
                break
            if info.is_main and step % cfg.log_freq == 0:
                print(
                    f"step {step} samples {samples} loss {loss.item():.4f} "
                    f"lr {optimizer.param_groups[0]['lr']:.3e}"
                )
        if step not in eval_steps:
            continue
        train_time = time.perf_counter() - window_start  # the NaN check above synchronised the device
        mllog.start(constants.EVAL_START, metadata={"epoch_num": samples})
        if eval_set is None:  # read once, kept on the device for every later eval
            eval_set = [b.to(info.device) for b in data.eval_batches(
                paths["eval_dir"], cfg.num_eval_examples, info.rank, info.world_size, cfg.eval_batch_size,
                cfg.max_seq_length)]  # fmt: skip
        accuracy = evaluate(model, eval_set, autocast, info.device)
        mllog.end(constants.EVAL_STOP, metadata={"epoch_num": samples})
        mllog.event(constants.EVAL_ACCURACY, accuracy, metadata={"epoch_num": samples})
        throughput = window_samples / max(train_time, 1e-9)
        mllog.event(
            "tracked_stats", {"throughput": throughput, "epoch_num": samples}, metadata={"step": step}
        )
        if accuracy >= cfg.target_accuracy:
            status = constants.SUCCESS
            break
        window_start, window_samples = time.perf_counter(), 0
    mllog.end(constants.BLOCK_STOP, metadata={"first_epoch_num": 0})
    mllog.event(constants.TRAIN_SAMPLES, samples)
    mllog.event(constants.EVAL_SAMPLES, data.count_eval_examples(paths["eval_dir"], cfg.num_eval_examples))
    mllog.end(constants.RUN_STOP, metadata={"status": status})
    dist.shutdown()
    progress = f"eval_accuracy {accuracy:.4f} (target {cfg.target_accuracy}) after {samples} samples"
    return outcome.ended(status == constants.SUCCESS, progress, diverged)


def fp8_settings(backend: str, fuse_ffn: bool = True, casts: str = "auto") -> Fp8Settings:
    """FP8 for the encoder layers' linears; with the native backend each layer's FFN runs as one function
    (unless `fuse_ffn` is off: to compare)."""
    layout = MlpLayout(FeedForward, up="up", down="down") if fuse_ffn else None
    return Fp8Settings(backend=backend, fuse_mlp=layout, casts=casts)


def loss_scaler(precision: str, init_scale: float, device: torch.device) -> torch.amp.GradScaler:
    """fp16: a dynamic loss scale from `init_scale` (INIT_LOSS_SCALE), so that small gradients do not flush to
    zero in float16; a step whose gradients overflow is skipped and the scale halved. Other precisions: off
    (the scaler passes the loss and the step through)."""
    return torch.amp.GradScaler(device.type, init_scale=init_scale, enabled=precision == "fp16")


NO_LOSS_SCALE = torch.amp.GradScaler("cpu", enabled=False)


def train_step(model, optimizer, batches, gradient_steps: int, autocast, info: dist.DistInfo,
               scaler: torch.amp.GradScaler = NO_LOSS_SCALE) -> torch.Tensor:  # fmt: skip
    """One optimizer step over `gradient_steps` micro-batches; returns the last micro-batch's loss. Native
    FP8's first step measures its scales on the first micro-batch before it trains (`fp8.calibrate`)."""
    for micro in range(gradient_steps):
        batch = next(batches).to(info.device)
        if micro == 0:
            calibrate(model, functools.partial(_calibration_pass, model, batch, autocast))
        sync = micro == gradient_steps - 1 or info.world_size == 1
        with nullcontext() if sync else model.no_sync(), autocast():
            loss = pretraining_loss(*model(batch), batch)
        scaler.scale(loss / gradient_steps).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def _calibration_pass(model, batch, autocast) -> None:
    with autocast():
        loss = pretraining_loss(*model(batch), batch)
    loss.backward()


def warm_up(model, optimizer, cfg: BertConfig, autocast, info: dist.DistInfo, scaler: torch.amp.GradScaler,
            steps: int = 2) -> None:  # fmt: skip
    """Untimed, before run_start (as NVIDIA does): compile the model and optimizer on synthetic rows with
    LR 0, so the weights do not move, then clear the optimizer state. A no-op unless COMPILE=1."""
    if not cfg.compile:
        return
    batch = data.pad_static(data.collate(data.synthetic_rows(cfg.batch_size, cfg.max_seq_length),
                                         cfg.max_seq_length), cfg.batch_size)  # fmt: skip
    for group in optimizer.param_groups:
        group["lr"] = 0.0
    for _ in range(steps):
        train_step(model, optimizer, iter([batch] * cfg.gradient_steps), cfg.gradient_steps, autocast, info,
                   scaler)  # fmt: skip
    optimizer.state.clear()
    optimizer.reset_step()


def log_hyperparameters(mllog: MLLogger, cfg: BertConfig, gbs: int) -> None:
    """Every key the BERT closed rules require, plus the ones NVIDIA logs for the reader."""
    mllog.hyperparameters({
        constants.GLOBAL_BATCH_SIZE: gbs,
        "d_batch_size": cfg.batch_size,
        constants.GRADIENT_ACCUMULATION_STEPS: cfg.gradient_steps,
        "max_predictions_per_seq": cfg.max_predictions_per_seq,
        constants.MAX_SEQUENCE_LENGTH: cfg.max_seq_length,
        constants.OPT_LR_TRAINING_STEPS: cfg.max_steps,
        constants.NUM_WARMUP_STEPS: cfg.num_warmup_steps(),
        constants.OPT_BASE_LR: cfg.lr,
        constants.OPT_LAMB_EPSILON: cfg.lamb_epsilon,
        constants.OPT_LR_WARMUP_STEPS: cfg.num_warmup_steps(),
        constants.START_WARMUP_STEP: cfg.start_warmup_step,
        constants.OPT_LAMB_BETA_1: cfg.beta1,
        constants.OPT_LAMB_BETA_2: cfg.beta2,
        constants.OPT_LAMB_WEIGHT_DECAY: cfg.weight_decay,
        "opt_lamb_learning_rate_decay_poly_power": 1.0,
        "target_accuracy": cfg.target_accuracy,
    })  # fmt: skip
    if cfg.target_accuracy != OFFICIAL_TARGET:
        print(f"bert: TARGET_MLM_ACCURACY={cfg.target_accuracy} is not MLPerf's {OFFICIAL_TARGET}: "
              "this run is NOT a valid MLPerf result", file=sys.stderr)  # fmt: skip


def apply_compile(model: torch.nn.Module, enabled: bool, mode: str | None = None) -> torch.nn.Module:
    """torch.compile around the DDP wrapper, so that its optimizer splits the graph at bucket boundaries
    and gradient all-reduces overlap the backward pass."""
    return torch.compile(model, mode=mode) if enabled else model


def apply_data_parallel(model: torch.nn.Module, info: dist.DistInfo) -> torch.nn.Module:
    if info.world_size == 1:
        return model
    ids = [info.device.index] if info.device.type == "cuda" else None
    return DDP(model, device_ids=ids, gradient_as_bucket_view=True)


def autocast_context(precision: str, device: torch.device, fp8: Fp8):
    """A factory of the context every forward runs in: autocast to the compute dtype (bf16 under FP8 too,
    whose matmuls are the swapped linear layers) and Transformer Engine's FP8 autocast where TE is the FP8
    backend."""
    dtype = {"bf16": torch.bfloat16, "fp8": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if dtype is None:
        return nullcontext

    def context() -> ExitStack:
        stack = ExitStack()
        stack.enter_context(torch.autocast(device.type, dtype=dtype))
        stack.enter_context(fp8.forward_context())
        return stack

    return context


@torch.no_grad()
def evaluate(model, eval_set, autocast, device) -> float:
    """Masked-LM accuracy over all ranks, weighted by masked tokens."""
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    for batch in eval_set:
        with autocast():
            mlm_logits, _ = model(batch)
        totals[0] += (mlm_logits.argmax(-1) == batch.mlm_labels).sum()
        totals[1] += batch.mlm_labels.numel()
    model.train()
    correct, count = dist.all_reduce_sum(totals).tolist()
    return correct / count if count else math.nan


if __name__ == "__main__":
    outcome.run(main, "bert")
