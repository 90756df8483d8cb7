"""One Llama training step and one evaluation pass, written once: the trainers, the throughput suite, the
golden tests, the parallel test worker and the `perf/` benches all call `train_step`, so every published
speed-up measures the trainer's own step.

A `Step` holds what the step needs besides its data (model, optimizer, layout, loss, contexts); a run's is
made by `training.llama.build.build_run`. A micro-batch is `(tokens, labels)` ((MBS, seq) each; labels of -100
are not scored), or for packed rows `(tokens, labels, position_ids, cu_seqlens)` (one row of several
sequences: positions restart at each, attention stays inside each). Each branch of the layout is taken here,
inside the functions: pipeline parallelism runs the step's micro-batches through its schedule; otherwise they
run one at a time (FSDP2 reduce-scatters after the last only), inside PyTorch's context-parallel context when
the sequences are split across ranks.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from training.common import dist
from training.fp4 import Fp4
from training.fp8 import Fp8, calibrate, reset_after_materialize
from training.llama import parallel
from training.llama.checkpointing import recompute_every_block
from training.llama.model import cross_entropy


@dataclass
class Step:
    model: nn.Module
    optimizer: torch.optim.Optimizer | None  # None: evaluation only
    layout: parallel.Parallelism
    device: torch.device
    mesh: object | None = None  # the (dp, pp, cp, tp) DeviceMesh, None for one process
    loss_fn: object = cross_entropy  # (logits, labels, reduction) -> loss; labels of -100 are ignored
    autocast: contextlib.AbstractContextManager = field(default_factory=contextlib.nullcontext)
    fp8: Fp8 = field(default_factory=Fp8)
    clip_norm: float = 1.0
    # FSDP2 with several micro-batches: reduce-scatter the gradients after each (no unsharded gradients of
    # the whole model held between them, 4 bytes a parameter in fp32) or, by default, after the last only
    sync_each_micro_batch: bool = False
    schedule: object | None = None  # set by `__post_init__` with pipeline parallelism
    # whether native FP8's scales were looked at (`training.fp8.calibrate`): the look walks every module
    # (0.2-0.4 ms on the host for the 8B and 70B), so it is made at the first step only (and by the warm-up)
    fp8_checked: bool = False

    def __post_init__(self):
        groups = self.optimizer.param_groups if self.optimizer is not None else []
        self.params = [p for group in groups for p in group["params"]]  # the sharded parameters
        self.stages = self.mesh["pp"].get_group() if self.layout.pp > 1 else None
        if self.layout.pp > 1 and self.schedule is None:
            self.schedule = parallel.pipeline_schedule(
                self.model, self.mesh, self.device, self.layout.grad_accum, pipeline_loss
            )


def pipeline_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """A micro-batch's loss on the last pipeline stage: the mean over its tokens in training; summed over
    labelled tokens and divided by all, so that evaluation can pad with unlabelled (-100) sequences."""
    return cross_entropy(logits, labels, reduction="sum") / labels.numel()


def _forward(step: Step, batch: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, labels) of one micro-batch (moved to the device), inside the autocast and FP8 contexts."""
    tokens, labels, *packing = (t.to(step.device, non_blocking=True) for t in batch)
    kwargs = dict(zip(("position_ids", "cu_seqlens"), packing))
    with step.autocast, step.fp8.forward_context():
        return step.model(tokens, **kwargs), labels


def forward_backward(step: Step, micro_batches: list[tuple]) -> torch.Tensor:
    """Forward and backward of the step's micro-batches on this rank, the gradients averaged over them (each
    micro-batch's loss is the mean over its labelled tokens). Returns this rank's mean loss (zero on pipeline
    stages other than the last)."""
    loss_sum = torch.zeros((), device=step.device)
    if step.schedule is not None:  # the pipeline runs the micro-batches (and FSDP's gradient sync)
        tokens, labels = (torch.cat(t).to(step.device) for t in zip(*micro_batches))
        losses = []
        with step.autocast:
            parallel.pipeline_step(step.schedule, step.mesh, tokens, labels, losses)
        return torch.stack(losses).mean().detach() if losses else loss_sum
    accum = len(micro_batches)
    for micro, batch in enumerate(micro_batches):
        if hasattr(step.model, "set_requires_gradient_sync"):  # FSDP2
            step.model.set_requires_gradient_sync(step.sync_each_micro_batch or micro == accum - 1)
        if len(batch) > 2:  # packed rows (no context parallelism: `feature_problems` refuses it)
            logits, labels = _forward(step, batch)
            loss = step.loss_fn(logits, labels)
            (loss / accum).backward()
        else:
            tokens, labels = (t.to(step.device, non_blocking=True) for t in batch)
            cp_context, positions = parallel.context_parallel(step.mesh, tokens, labels)
            with cp_context:  # with CP: this rank's chunks of the sequences, ring attention
                with step.autocast, step.fp8.forward_context():
                    logits = step.model(tokens, positions)
                    split = step.layout.cp > 1
                    loss = _chunk_loss(step, logits, labels) if split else step.loss_fn(logits, labels)
                (loss / accum).backward()
        loss_sum += loss.detach() / accum
    return loss_sum


def _chunk_loss(step: Step, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """A context-parallel rank's share of its micro-batch's loss: its chunks' loss sum over the labelled
    tokens of the whole micro-batch (counted over the CP group), times the CP size, so that FSDP2's mean over
    the data- and context-parallel ranks gives the gradient of each micro-batch's mean loss. A plain mean
    per chunk would weigh the chunks of a masked row (LoRA's prompt is not scored) by their own counts, and a
    chunk of the prompt alone would be 0 / 0."""
    group = step.mesh["cp"]
    count = (labels != -100).sum().float()
    torch.distributed.all_reduce(count, group=group.get_group())
    return step.loss_fn(logits, labels, reduction="sum") * group.size() / count.clamp(min=1)


def train_step(
    step: Step, micro_batches: list[tuple[torch.Tensor, torch.Tensor]], lr: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step at learning rate `lr` over the step's micro-batches (this rank's share of the
    global batch): forward and backward, the gradients clipped by their global norm, AdamW, the FP8 hook.
    Returns (the step's loss over all its sequences, the gradient norm before clipping), on the device."""
    for group in step.optimizer.param_groups:
        group["lr"] = lr
    if not step.fp8_checked:  # native FP8's scales measured on this batch first, unless the warm-up did
        calibrate(
            step.model, lambda: forward_backward(step, micro_batches), recompute_every_block(step.model)
        )
        step.fp8_checked = True
    loss = forward_backward(step, micro_batches)
    # the mean of every rank's loss (data-parallel ranks read different sequences, context-parallel ranks
    # shares of them scaled by the CP size, tensor-parallel ranks the same; of a pipeline only the last
    # stage has it)
    loss = dist.all_reduce_sum(loss) / (step.layout.world_size // step.layout.pp)
    grad_norm = parallel.clip_grad_norm_(step.params, step.clip_norm, step.stages, step.optimizer)
    step.optimizer.step()
    step.optimizer.zero_grad(set_to_none=True)
    step.fp8.weights_changed(step.model)
    return loss, grad_norm


PRECISION_SWITCH = "precision_switch"  # the MLLOG key of a run's switch from 4 bits to FP8 (`heal_if_due`)


def heal_if_due(step: Step, index: int) -> dict | None:
    """Before optimizer step `index` (from 0) of a run with FP4 healing (HEALING_ITER): if this is the first
    step to run in FP8, move the 4-bit linears to FP8 delayed scaling (their scales measured on this step's
    batch first, `training.fp8.calibrate`) and return what the log records of the switch (the MLLOG
    `precision_switch` event's value and step); else None."""
    fp4 = step.fp8
    if not isinstance(fp4, Fp4) or not fp4.heals_before(index):
        return None
    fp4.heal()
    step.fp8_checked = False
    return {"from": fp4.recipe.format, "to": "fp8", "step": index + 1}


@torch.no_grad()
def evaluate(step: Step, validation: torch.Tensor, dp_rank: int, micro_batch: int) -> float:
    """Mean next-token loss (the log-perplexity) over the labelled tokens of the validation rows
    ((n, seq + 1) token ids), split across data-parallel ranks."""
    dp = step.layout.dp
    mine = validation[dp_rank::dp]
    pipeline = step.schedule is not None
    chunk = micro_batch * (step.layout.grad_accum if pipeline else 1)
    rounds = math.ceil(math.ceil(len(validation) / dp) / chunk)
    if not pipeline:
        batches = [(b[:, :-1], b[:, 1:]) for b in mine.long().split(chunk)]
        pad = validation[:1].long()
        return evaluate_batches(step, batches, rounds, (pad[:, :-1], pad[:, 1:]))
    step.model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=step.device)
    for b in range(rounds):
        batch = mine[b * chunk : (b + 1) * chunk].to(step.device, non_blocking=True).long()
        totals += _pipeline_eval_sums(step, batch, chunk, validation[:1])
    return _finish_evaluation(step, totals)


@torch.no_grad()
def evaluate_batches(step: Step, batches: list[tuple], rounds: int, pad: tuple) -> float:
    """Mean loss over the labelled tokens of every rank's micro-batches (this rank's: `batches`). Every rank
    runs `rounds` forwards (FSDP gathers weights collectively): a rank out of micro-batches runs `pad` with
    zero weight."""
    step.model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=step.device)
    for b in range(rounds):
        batch, weight = (batches[b], 1.0) if b < len(batches) else (pad, 0.0)
        logits, labels = _forward(step, batch)
        totals[0] += weight * step.loss_fn(logits, labels, reduction="sum").double()
        totals[1] += weight * int((labels != -100).sum())
    return _finish_evaluation(step, totals)


def _finish_evaluation(step: Step, totals: torch.Tensor) -> float:
    step.model.train()
    parallel.reshard(step.model)  # FSDP2 keeps the root gathered after a no-grad forward
    # every rank of a tensor-parallel group adds the same sums: the ratio is unchanged
    loss_sum, count = dist.all_reduce_sum(totals).tolist()
    return loss_sum / count


def _pipeline_eval_sums(step: Step, batch: torch.Tensor, chunk: int, pad: torch.Tensor) -> torch.Tensor:
    """(loss sum, labelled tokens) of `batch` through the pipeline, padded to `chunk` rows with unlabelled
    copies of `pad`; the last stage turns its per-token means back into sums (the others add zeros)."""
    # contiguous: the pipeline stages check their inputs' strides against the training micro-batches'
    # (torch 2.11 on the GPUs refused these slices of the (n, seq + 1) rows)
    tokens, labels = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()
    if len(batch) < chunk:
        rows = chunk - len(batch)
        tokens = torch.cat([tokens, pad[:, :-1].to(step.device).long().expand(rows, -1)])
        labels = torch.cat([labels, labels.new_full((rows, labels.shape[1]), -100)])
    losses = []
    with step.autocast:
        parallel.pipeline_step(step.schedule, step.mesh, tokens, labels, losses, train=False)
    totals = torch.zeros(2, dtype=torch.float64, device=step.device)
    if losses:
        totals[0] += sum(float(loss) for loss in losses) * (labels.numel() // step.layout.grad_accum)
        totals[1] += int((labels != -100).sum())
    return totals


def warm_up(step: Step, steps: int, micro_batch: int, seq_length: int, vocab_size: int) -> None:
    """Compile and warm the kernels before the clock starts, as NVIDIA's RUN_WARMUP_ON_SYNTH_DATA: `steps`
    forward and backward passes of a step's micro-batches of random tokens, then an evaluation forward;
    gradients dropped and no optimizer step, so the weights stay exactly the initialized ones. No training
    or validation data is read. Native FP8's scaling state is then reset (NVIDIA: reset_fp8_state) and
    measured on the same random tokens (`training.fp8.calibrate`), so that the first timed step does not
    cast with scale 1."""
    if steps == 0:
        return
    accum = step.layout.grad_accum if step.schedule is not None else 1
    # FP4 with WARMUP_RECIPE=fp8_hybrid: these passes in FP8, the training in 4 bits
    in_fp8 = step.fp8.fp8_for_warmup() if isinstance(step.fp8, Fp4) else contextlib.nullcontext()
    with in_fp8:
        for _ in range(steps):  # contiguous (MBS, seq) tokens, as the training batches
            tokens = torch.randint(0, vocab_size, (micro_batch * accum, seq_length), device=step.device)
            forward_backward(step, [(t, t) for t in tokens.chunk(accum)])
        step.model.zero_grad(set_to_none=True)
        step.model.eval()
        with torch.no_grad(), step.autocast:  # the evaluation's forward and loss, compiled here too
            if step.schedule is not None:
                parallel.pipeline_step(step.schedule, step.mesh, tokens, tokens, [], train=False)
            else:
                with step.fp8.forward_context():
                    step.loss_fn(step.model(tokens), tokens, reduction="sum")
    step.model.train()
    parallel.reshard(step.model)
    reset_after_materialize(step.model)
    calibrate(
        step.model,
        lambda: forward_backward(step, [(t, t) for t in tokens.chunk(accum)]),
        recompute_every_block(step.model),
    )
    step.fp8_checked = True
