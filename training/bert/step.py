"""BERT's training step and evaluation, written once: the trainer (`train.py`), the golden test and the
benches (`perf/bench_bert.py`, `perf/curve_parity.py`) all call `train_step`, so every published speed-up
measures the trainer's own step. `warm_up` compiles it before the clock starts; `evaluate` is the masked-LM
accuracy over every rank's evaluation rows.
"""

from __future__ import annotations

import functools
import math
from contextlib import nullcontext

import torch

from training.bert import data
from training.bert.config import BertConfig
from training.bert.model import pretraining_loss
from training.common import dist
from training.fp8 import calibrate


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
