"""BERT's training step and evaluation, written once: the trainer (`train.py`), the golden test and the
benches (`perf/bench_bert.py`, `perf/curve_parity.py`) all call `train_step` (through `Step`, which
`build.build_run` builds), so every published speed-up measures the trainer's own step. `warm_up` compiles it
before the clock starts; `evaluate` is the masked-LM accuracy over every rank's evaluation rows.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from training.bert import data
from training.bert.config import BertConfig
from training.bert.model import pretraining_loss
from training.common import dist
from training.fp8 import Fp8, calibrate


def loss_scaler(precision: str, init_scale: float, device: torch.device) -> torch.amp.GradScaler:
    """fp16: a dynamic loss scale from `init_scale` (INIT_LOSS_SCALE), so that small gradients do not flush to
    zero in float16; a step whose gradients overflow is skipped and the scale halved. Other precisions: off
    (the scaler passes the loss and the step through)."""
    return torch.amp.GradScaler(device.type, init_scale=init_scale, enabled=precision == "fp16")


NO_LOSS_SCALE = torch.amp.GradScaler("cpu", enabled=False)


def train_step(
    model,
    optimizer,
    batches,
    gradient_steps: int,
    autocast,
    info: dist.DistInfo,
    scaler: torch.amp.GradScaler = NO_LOSS_SCALE,
) -> torch.Tensor:
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


@dataclass
class Step:
    """`train_step` with what `build.build_run` built: the wrapped model (DDP, compiled), LAMB, the
    micro-batches a step, the forward's context, the loss scale. `step(batches, lr)` trains one step."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    gradient_steps: int
    autocast: object  # a factory of the context every forward runs in (`build.autocast_context`)
    info: dist.DistInfo
    fp8: Fp8
    scaler: torch.amp.GradScaler = NO_LOSS_SCALE

    def __call__(self, batches, lr: float | None = None) -> torch.Tensor:
        """One optimizer step over the next `gradient_steps` batches of `batches`, at learning rate `lr`
        (None: the optimizer's as it stands); returns the last micro-batch's loss."""
        if lr is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        return train_step(
            self.model, self.optimizer, batches, self.gradient_steps, self.autocast, self.info, self.scaler
        )


def _calibration_pass(model, batch, autocast) -> None:
    with autocast():
        loss = pretraining_loss(*model(batch), batch)
    loss.backward()


def warm_up(step: Step, cfg: BertConfig, scaler: torch.amp.GradScaler, steps: int = 2) -> None:
    """Untimed, before run_start (as NVIDIA does): compile the model and optimizer on synthetic rows with
    LR 0, so the weights do not move, then clear the optimizer state. `scaler`: a loss scale of its own, so
    the run's starts afresh. A no-op unless COMPILE=1."""
    if not cfg.compile:
        return
    rows = data.collate(data.synthetic_rows(cfg.batch_size, cfg.max_seq_length), cfg.max_seq_length)
    batch = data.pad_static(rows, cfg.batch_size)
    warm = dataclasses.replace(step, scaler=scaler)
    for _ in range(steps):
        warm(iter([batch] * step.gradient_steps), lr=0.0)
    step.optimizer.state.clear()
    step.optimizer.reset_step()


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
