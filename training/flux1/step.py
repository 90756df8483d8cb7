"""Flux.1's training step and validation loss, as the MLPerf reference computes them (torchtitan's
`FluxTrainer.train_step` and `eval_step`, branch mlperf-training-flux.1):

- the clean latent is sampled from the stored VAE posterior and normalized:
  x0 = (mean + exp(logvar / 2) * eps - 0.1159) * 0.3611, eps ~ N(0, 1);
- training draws one time per image uniformly, t ~ U[0, 1) (no logit-normal, no shift), the noised latent is
  x_t = (1 - t) x0 + t * noise, and the transformer predicts the velocity noise - x0 from the 2x2-patchified
  x_t, the T5 sequence and the pooled CLIP embedding at time t; the loss is the mean squared error in float32
  over the whole micro-batch; 10 % of the training samples carry the empty caption's encodings instead of
  their own (classifier-free guidance dropout, drawn by the data: `data.TrainStream`);
- validation evaluates each sample at its own time t = timestep / 8 (timestep 0..7, stored with it), the
  same way; a sample's loss is the mean over its latent, and the score is the sum of the samples' losses over
  all ranks divided by their number (the reference's `eval`: the 8 timesteps are equally frequent in the
  set, so this is the mean of the 8 per-timestep means).
Inputs are cast to the compute dtype as the reference casts them to its `mixed_precision_param` (bf16 on
GPUs), times included. The random draws come from one generator per rank (`Draws`): eps, then noise, then t.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from training.common import dist
from training.flux1.model import (
    AUTOENCODER_SCALE,
    AUTOENCODER_SHIFT,
    image_ids,
    pack_latents,
    text_ids,
    unpack_latents,
)
from training.fp8 import Fp8

EVAL_TIMESTEPS = 8  # validation times t = 0/8 ... 7/8


@dataclass
class Batch:
    """One micro-batch as the data holds it: T5 [b, T, D], pooled CLIP [b, P], the VAE posterior's mean and
    log-variance [b, C, H, W], and (validation) each sample's timestep index 0..7."""

    t5: torch.Tensor
    clip: torch.Tensor
    mean: torch.Tensor
    logvar: torch.Tensor
    timestep: torch.Tensor | None = None

    def to(self, device: torch.device, dtype: torch.dtype) -> Batch:
        def move(x):
            return x.to(device=device, dtype=dtype, non_blocking=True)

        ts = None if self.timestep is None else self.timestep.to(device)
        return Batch(move(self.t5), move(self.clip), move(self.mean), move(self.logvar), ts)


class Draws:
    """The step's random numbers, from one generator on the device, seeded from (the run's seed, the rank,
    the stream): each data-parallel rank draws its own noise, as the reference's distinct per-rank seeds, and
    the validation's draws do not move training's."""

    def __init__(self, seed: int, rank: int, stream: str, device: torch.device):
        streams = ("train", "eval")
        state = np.random.SeedSequence([seed, rank, streams.index(stream)]).generate_state(1, np.uint64)[0]
        self.generator = torch.Generator(device=device).manual_seed(int(state))

    def normal(self, like: torch.Tensor) -> torch.Tensor:
        return torch.randn(like.shape, generator=self.generator, device=like.device, dtype=like.dtype)

    def uniform(self, n: int, like: torch.Tensor) -> torch.Tensor:
        return torch.rand(n, generator=self.generator, device=like.device).to(like.dtype)


def clean_latents(mean: torch.Tensor, logvar: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """x0: a draw of the VAE posterior, shifted and scaled as FLUX.1's autoencoder encodes."""
    return (mean + torch.exp(0.5 * logvar) * eps - AUTOENCODER_SHIFT) * AUTOENCODER_SCALE


def velocity_loss(
    model: nn.Module,
    x0: torch.Tensor,
    noise: torch.Tensor,
    t: torch.Tensor,
    t5: torch.Tensor,
    clip: torch.Tensor,
    per_sample: bool = False,
) -> torch.Tensor:
    """The rectified-flow loss of `model` at times `t` [b]: the float32 mean squared error between its
    velocity and noise - x0, over everything (or per sample with `per_sample`)."""
    _, _, height, width = x0.shape
    sigma = t.view(-1, 1, 1, 1)
    noised = (1 - sigma) * x0 + sigma * noise
    velocity = model(
        hidden_states=pack_latents(noised),
        encoder_hidden_states=t5,
        pooled_projections=clip,
        timestep=t,
        img_ids=image_ids(height, width, x0.device).to(x0.dtype),
        txt_ids=text_ids(t5.shape[1], x0.device).to(x0.dtype),
        return_dict=False,
    )[0]
    pred = unpack_latents(velocity, height, width)
    target = noise - x0
    if per_sample:
        return F.mse_loss(pred.float(), target.float(), reduction="none").mean(dim=(1, 2, 3))
    return F.mse_loss(pred.float(), target.float())


def train_loss(model: nn.Module, batch: Batch, draws: Draws) -> torch.Tensor:
    """One micro-batch's training loss: x0 from the posterior, noise, then t ~ U[0, 1) per image."""
    x0 = clean_latents(batch.mean, batch.logvar, draws.normal(batch.mean))
    noise = draws.normal(x0)
    t = draws.uniform(x0.shape[0], x0)
    return velocity_loss(model, x0, noise, t, batch.t5, batch.clip)


def eval_loss_sum(model: nn.Module, batch: Batch, draws: Draws) -> torch.Tensor:
    """The sum of one validation micro-batch's per-sample losses, each at t = timestep / 8."""
    x0 = clean_latents(batch.mean, batch.logvar, draws.normal(batch.mean))
    noise = draws.normal(x0)
    t = (batch.timestep.float() / EVAL_TIMESTEPS).to(x0.dtype)
    return velocity_loss(model, x0, noise, t, batch.t5, batch.clip, per_sample=True).sum()


def lr_at(step: int, base_lr: float, warmup_steps: int) -> float:
    """torchtitan's linear warm-up then constant LR (decay_ratio 0): step `step` (from 0) trains at
    base x ((step + 1) / warmup) during the warm-up (LambdaLR's product), base afterwards."""
    if step < warmup_steps:
        return base_lr * ((step + 1) / warmup_steps)
    return base_lr


@dataclass
class Step:
    """What one optimizer step needs: the model (wrapped as built), its optimizer and parameters, the
    compute dtype the inputs are cast to, autocast (where one process computes in bf16), the random draws,
    the gradient clip norm and FP8's hooks."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    params: list[nn.Parameter]
    dtype: torch.dtype
    autocast: contextlib.AbstractContextManager | None
    draws: Draws
    eval_draws: Draws
    clip_norm: float
    device: torch.device
    fp8: Fp8 = dataclasses.field(default_factory=Fp8)  # its forward context, its hook after each update

    @contextlib.contextmanager
    def context(self):
        """Around each forward: autocast where one process computes in bf16, and FP8's own context."""
        with self.autocast or contextlib.nullcontext(), self.fp8.forward_context():
            yield


def train_step(step: Step, micro_batches: list[Batch], lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step over `micro_batches` (gradient accumulation: the mean of their losses); returns
    (the step's loss averaged over the ranks, the gradient norm before clipping)."""
    step.model.train()
    total = torch.zeros((), device=step.device)
    for i, batch in enumerate(micro_batches):
        if hasattr(step.model, "set_requires_gradient_sync"):  # FSDP2: reduce once, after the last
            step.model.set_requires_gradient_sync(i == len(micro_batches) - 1)
        with step.context():
            loss = train_loss(step.model, batch.to(step.device, step.dtype), step.draws)
        (loss / len(micro_batches)).backward()
        total += loss.detach() / len(micro_batches)
    grad_norm = torch.nn.utils.clip_grad_norm_(step.params, step.clip_norm, foreach=True)
    for group in step.optimizer.param_groups:
        group["lr"] = lr
    step.optimizer.step()
    step.optimizer.zero_grad(set_to_none=True)
    step.fp8.weights_changed(step.model)
    return dist.all_reduce_sum(total) / _world(), grad_norm


def calibrate_fp8(step: Step, batch: Batch) -> bool:
    """Native FP8's scales measured before the first update (`training.fp8.calibrate`), on `batch` (a
    synthetic one: no data is read before the clock starts), its draws from a generator of its own (the
    step's are not moved). False where nothing needs it."""
    from training.fp8 import calibrate

    scratch = Draws(0, 0, "eval", step.device)

    def forward_backward() -> None:
        with step.context():
            loss = train_loss(step.model, batch.to(step.device, step.dtype), scratch)
        loss.backward()

    return calibrate(step.model, forward_backward)


@torch.no_grad()
def evaluate(step: Step, batches) -> float:
    """The validation loss: every rank's per-sample losses summed, over every rank's sample count."""
    step.model.eval()
    loss_sum = torch.zeros((), device=step.device, dtype=torch.float64)
    count = torch.zeros((), device=step.device, dtype=torch.float64)
    for batch in batches:
        with step.context():
            loss_sum += eval_loss_sum(step.model, batch.to(step.device, step.dtype), step.eval_draws).double()
        count += batch.mean.shape[0]
    step.model.train()
    return (dist.all_reduce_sum(loss_sum) / dist.all_reduce_sum(count)).item()


def _world() -> int:
    return torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
