"""BERT-Large phase-2 pretraining, MLPerf Training rules: `torchrun -m training.bert.train`.

Setup (untimed, between init_start and init_stop), then the timed run: train on packed rows, evaluate
masked-LM accuracy at the scheduled sample counts, stop at the target (`success`) or, as NVIDIA's loop, after
MAX_STEPS (or MAX_SAMPLES_TERMINATION samples, if sooner: `aborted`). A NaN/inf loss also ends the run
`aborted`. The log counts the sequences of the packed rows trained on, as NVIDIA's does. How the run ended
(converged, not converged, diverged, or what it raised) goes to LOGDIR/<RUN_TAG>.outcome.json
(training.common.outcome).
"""

from __future__ import annotations

import functools
import math
import sys
from contextlib import ExitStack, nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from training.bert import attention as attention_impls
from training.bert import data
from training.bert.config import BENCHMARK, OFFICIAL_TARGET, BertConfig
from training.bert.model import (
    BertForPackedPretraining,
    BertShape,
    FeedForward,
    load_pretrained,
    pretraining_loss,
)
from training.bert.optim import Lamb, param_groups, poly_warmup_lr
from training.common import backends, dist, outcome
from training.common.config import ConfigError, config_from_environment
from training.common.mllog import MLLogger, constants
from training.common.mlperf_loop import MLPerfRun, Schedule, StepResult
from training.fp8 import Fp8, Fp8Settings, MlpLayout, apply_fp8, calibrate


def main() -> outcome.Outcome:
    cfg = config_from_environment(BertConfig, __doc__)
    info = dist.init_distributed()
    seed = dist.run_seed(cfg.seed, info.device)
    run = MLPerfRun(BENCHMARK, cfg, info, seed, "bert")
    dist.seed_everything(seed + info.rank)
    gbs = cfg.global_batch_size(info.world_size)
    log_hyperparameters(run.mllog, cfg, gbs)

    paths = cfg.paths()
    precision = backends.choose_precision(cfg.requested_precision())
    model, fp8, chosen = build_model(cfg, paths, info.device, precision)
    chosen |= {"optimizer": "lamb_foreach_compiled" if cfg.compile else "lamb_foreach",
               "data_parallel": "ddp" if info.world_size > 1 else "none",
               "residual_dtype": cfg.residual_dtype,
               "compile": cfg.compile_mode if cfg.compile else "none",
               "loss_scale": f"dynamic from {cfg.init_loss_scale}" if precision == "fp16" else "none",
               "platform": backends.platform_name()}  # fmt: skip
    run.log_backends(chosen)
    run.mllog.event(constants.WEIGHTS_INITIALIZATION, str(paths["init_checkpoint"] or "random"))

    optimizer = Lamb(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                     eps=cfg.lamb_epsilon, max_grad_norm=cfg.max_grad_norm, compiled=cfg.compile)  # fmt: skip
    train_model = apply_compile(apply_data_parallel(model, info), cfg.compile, cfg.compile_mode)
    autocast = autocast_context(precision, info.device, fp8)
    run.write_config({"world_size": info.world_size, "global_batch_size": gbs, "backends": chosen})
    warm_up(
        train_model, optimizer, cfg, autocast, info, loss_scaler(precision, cfg.init_loss_scale, info.device)
    )
    scaler = loss_scaler(precision, cfg.init_loss_scale, info.device)
    max_steps = cfg.max_train_steps(info.world_size)

    @functools.cache
    def eval_set() -> list[data.Batch]:
        """This rank's eval batches: read at the first evaluation and kept on the device."""
        batches = data.eval_batches(paths["eval_dir"], cfg.num_eval_examples, info.rank, info.world_size,
                                    cfg.eval_batch_size, cfg.max_seq_length)  # fmt: skip
        return [b.to(info.device) for b in batches]

    def start_training():
        shards = data.list_shards(paths["train_dir"])
        batches = data.Prefetcher(data.train_batches(shards, info.rank, info.world_size, cfg.batch_size,
                                                     cfg.max_seq_length, seed, static=cfg.compile),
                                  info.device)  # fmt: skip

        def one_step(index: int) -> StepResult:
            lr = poly_warmup_lr(index, cfg.lr, cfg.max_steps, cfg.num_warmup_steps(), cfg.warmup_start())
            for group in optimizer.param_groups:
                group["lr"] = lr
            micro = [next(batches) for _ in range(cfg.gradient_steps)]
            loss = train_step(train_model, optimizer, iter(micro), cfg.gradient_steps, autocast, info, scaler)
            return StepResult(loss, lr, samples=sum(b.num_sequences for b in micro))

        return one_step

    return run.train(
        Schedule(gbs, max_steps, set(cfg.eval_steps(info.world_size)), cfg.log_freq),
        start_training,
        lambda: evaluate(model, eval_set(), autocast, info.device),
        cfg.target_accuracy,
        metric="eval_accuracy",
        eval_samples=data.count_eval_examples(paths["eval_dir"], cfg.num_eval_examples),
    )


def build_model(cfg: BertConfig, paths: dict, device: torch.device, precision: str):
    """(model, FP8 hooks, what was chosen): the model of BERT_CONFIG with its attention, the checkpoint's
    weights (or a random init) on `device`, FP8 swapped in for PRECISION=fp8."""
    shape = BertShape.from_json(paths["bert_config"])
    attention = attention_impls.choose_attention(cfg.attention)
    if cfg.residual_dtype == "bf16" and precision not in ("bf16", "fp8"):
        raise ConfigError(f"RESIDUAL_DTYPE=bf16 needs PRECISION bf16 or fp8; PRECISION={cfg.precision} "
                          f"resolved to {precision} here")  # fmt: skip
    model = BertForPackedPretraining(shape, attention)
    model.set_residual_dtype(torch.bfloat16 if cfg.residual_dtype == "bf16" else None)
    if paths["init_checkpoint"] is not None:
        load_pretrained(model, paths["init_checkpoint"])
    model.to(device)
    settings = fp8_settings(cfg.fp8_backend, casts=cfg.fp8_casts, amax_history=cfg.fp8_amax_history,
                            amax_algo=cfg.fp8_amax_algo)  # fmt: skip
    fp8 = apply_fp8(model, settings if precision == "fp8" else None)
    return model, fp8, {"attention": attention, "precision": precision, "fp8": fp8.description}


def fp8_settings(backend: str, fuse_ffn: bool = True, casts: str = "auto", amax_history: int = 4,
                 amax_algo: str = "most_recent") -> Fp8Settings:  # fmt: skip
    """FP8 for the encoder layers' linears; with the native backend each layer's FFN runs as one function
    (unless `fuse_ffn` is off: to compare)."""
    layout = MlpLayout(FeedForward, up="up", down="down") if fuse_ffn else None
    return Fp8Settings(backend=backend, fuse_mlp=layout, casts=casts, amax_history=amax_history,
                       amax_algo=amax_algo)  # fmt: skip


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
    """Every key the BERT closed rules require, plus the ones NVIDIA logs for the reader, with NVIDIA's
    types (its run_pretraining.py parses max_steps as a float: 3680.0)."""
    mllog.hyperparameters({
        constants.GLOBAL_BATCH_SIZE: gbs,
        "d_batch_size": cfg.batch_size,
        constants.GRADIENT_ACCUMULATION_STEPS: cfg.gradient_steps,
        "max_predictions_per_seq": cfg.max_predictions_per_seq,
        constants.MAX_SEQUENCE_LENGTH: cfg.max_seq_length,
        constants.OPT_LR_TRAINING_STEPS: float(cfg.max_steps),
        constants.NUM_WARMUP_STEPS: cfg.num_warmup_steps(),
        constants.OPT_BASE_LR: cfg.lr,
        constants.OPT_LAMB_EPSILON: cfg.lamb_epsilon,
        "opt_epsilon": cfg.lamb_epsilon,
        constants.OPT_LR_WARMUP_STEPS: cfg.num_warmup_steps(),
        constants.START_WARMUP_STEP: cfg.warmup_start(),
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
