"""Flux.1's step against the MLPerf reference's formulas, written here from its source (torchtitan branch
mlperf-training-flux.1 @9603aa83, `torchtitan/experiments/flux/{train.py,utils.py,loss.py,
model/autoencoder_utils.py}` and `components/lr_scheduler.py`), on a tiny transformer: the latent drawn from
the posterior and normalized, the patchify (`unfold`), the position ids, the noised latent, the velocity
target, the float32 MSE, the validation's per-sample mean summed over samples and divided by their count, and
the LR schedule. The random draws are replayed from the same generator in the step's order (eps, noise, t),
so the two compute the same numbers in the same order: equality is exact."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from training.flux1.model import FluxShape, build_model
from training.flux1.step import Batch, Draws, eval_loss_sum, lr_at, train_loss

SHAPE = FluxShape(
    double_layers=1,
    single_layers=1,
    num_heads=2,
    head_dim=16,
    axes_dims_rope=(4, 6, 6),
    text_width=24,
    pooled_width=20,
    latent_channels=4,
)


# ---- the reference, transcribed ----


def ref_pack_latents(x):  # utils.pack_latents
    b, c, lh, lw = x.shape
    h, w = lh // 2, lw // 2
    x = x.unfold(2, 2, 2).unfold(3, 2, 2)
    x = x.permute(0, 2, 3, 1, 4, 5)
    return x.reshape(b, h * w, c * 2 * 2)


def ref_unpack_latents(x, lh, lw):  # utils.unpack_latents
    b, _, cpp = x.shape
    h, w, c = lh // 2, lw // 2, cpp // 4
    x = x.reshape(b, h, w, c, 2, 2)
    x = x.permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c, h * 2, w * 2)


def ref_position_encoding(bsz, lh, lw):  # utils.create_position_encoding_for_latents
    h, w = lh // 2, lw // 2
    pe = torch.zeros(h, w, 3)
    pe[:, :, 1] = torch.arange(h).unsqueeze(1)
    pe[:, :, 2] = torch.arange(w).unsqueeze(0)
    return pe.view(1, h * w, 3).repeat(bsz, 1, 1)


def ref_labels(
    mean, logvar, eps
):  # autoencoder_utils.generate_unscaled_latent_from_mean_logvar, then train.py
    z = mean + torch.exp(0.5 * logvar) * eps
    return (z - 0.1159) * 0.3611


def ref_forward(model, labels, noise, timesteps, t5, clip):
    """train.py's train_step / eval_step from the noised latent to the prediction's target pair."""
    sigmas = timesteps.view(-1, 1, 1, 1)
    latents = (1 - sigmas) * labels + sigmas * noise
    bsz, _, lh, lw = latents.shape
    img_ids = ref_position_encoding(bsz, lh, lw)
    txt_ids = torch.zeros(bsz, t5.shape[1], 3)
    out = model(
        hidden_states=ref_pack_latents(latents),
        encoder_hidden_states=t5,
        pooled_projections=clip,
        timestep=timesteps,
        img_ids=img_ids[0],
        txt_ids=txt_ids[0],
        return_dict=False,
    )[0]
    return ref_unpack_latents(out, lh, lw), noise - labels


def batch(n: int, seed: int = 0, timesteps: bool = False) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(
        torch.randn(n, 6, 24, generator=g),
        torch.randn(n, 20, generator=g),
        2 * torch.randn(n, 4, 8, 8, generator=g),
        -4 + torch.randn(n, 4, 8, 8, generator=g),
        torch.arange(n) % 8 if timesteps else None,
    )


def model():
    torch.manual_seed(3)
    m = build_model(SHAPE)
    with torch.no_grad():  # the reference's init zeroes the output layer: give the test a non-zero output
        for p in m.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return m


def test_training_loss_is_the_references():
    m, b = model(), batch(4)
    draws = Draws(11, 0, "train", torch.device("cpu"))
    g = torch.Generator().set_state(draws.generator.get_state())  # the same stream, replayed
    ours = train_loss(m, b, draws)
    eps = torch.randn(b.mean.shape, generator=g)
    labels = ref_labels(b.mean, b.logvar, eps)
    noise = torch.randn(labels.shape, generator=g)
    t = torch.rand(4, generator=g)  # training: t ~ U[0, 1), one per image
    pred, target = ref_forward(m, labels, noise, t, b.t5, b.clip)
    reference = F.mse_loss(pred.float(), target.float().detach(), reduction="mean")  # loss.mse_loss
    assert torch.equal(ours, reference)
    assert 0.5 < ours.item() < 50  # a real loss: noise - x0 has variance about 1 + 0.36^2 x 4


def test_validation_loss_is_the_references():
    m, b = model(), batch(8, seed=1, timesteps=True)
    draws = Draws(5, 0, "eval", torch.device("cpu"))
    g = torch.Generator().set_state(draws.generator.get_state())
    ours = eval_loss_sum(m, b, draws)
    labels = ref_labels(b.mean, b.logvar, torch.randn(b.mean.shape, generator=g))
    noise = torch.randn(labels.shape, generator=g)
    pred, target = ref_forward(m, labels, noise, b.timestep / 8.0, b.t5, b.clip)  # t = timestep / 8
    per_sample = F.mse_loss(pred.float(), target.float(), reduction="none").mean(dim=(1, 2, 3))
    assert torch.equal(ours, per_sample.sum())
    # the README's algorithm: with each timestep equally often, the mean of the 8 per-timestep means
    by_t = torch.stack([per_sample[b.timestep == k].mean() for k in range(8)])
    # sums of 8 float32 values in two orders: a few float32 ulps apart
    assert math.isclose(ours.item() / 8, by_t.mean().item(), rel_tol=1e-6)


def test_lr_schedule_is_torchtitans():
    """components/lr_scheduler.py: linear warm-up (0-indexed step, + 1), then stable (decay_ratio 0)."""

    def titan(step, warmup):
        return (step + 1) / warmup if step < warmup else 1.0

    for warmup in (0, 1, 4, 1600):
        for step in (0, 1, 3, 4, 5, 1599, 1600, 10_000):
            assert lr_at(step, 2e-4, warmup) == 2e-4 * titan(step, warmup)


def test_init_is_dits_on_the_fused_matrices():
    """model.py:init_weights: zero modulations and output layer, embedders N(0, 0.02), Xavier-uniform with
    the bound of the reference's fused matrices (double blocks' qkv [3h, h], single blocks' linear1
    [3h + 4h, h]), biases 0, norm scales 1."""
    torch.manual_seed(0)
    shape = SHAPE.replace(num_heads=4)  # hidden 64: thousands of draws per matrix
    m, h = build_model(shape), shape.hidden
    zero = [
        m.norm_out.linear,
        m.proj_out,
        m.transformer_blocks[0].norm1.linear,
        m.transformer_blocks[0].norm1_context.linear,
        m.single_transformer_blocks[0].norm.linear,
    ]
    assert all(not layer.weight.any() and not layer.bias.any() for layer in zero)

    def near_bound(w, fan_in, fan_out):  # max |w| of >= 4096 uniform draws lies within 1 % of the bound
        bound = math.sqrt(6 / (fan_in + fan_out))
        return 0.99 * bound < w.abs().max().item() <= bound

    double, single = m.transformer_blocks[0], m.single_transformer_blocks[0]
    assert near_bound(double.attn.to_q.weight, h, 3 * h) and near_bound(
        double.attn.add_v_proj.weight, h, 3 * h
    )
    assert near_bound(single.attn.to_k.weight, h, 7 * h) and near_bound(single.proj_mlp.weight, h, 7 * h)
    assert near_bound(single.proj_out.weight, 5 * h, h) and near_bound(double.ff.net[0].proj.weight, h, 4 * h)
    std = m.time_text_embed.timestep_embedder.linear_1.weight.std().item()
    assert abs(std - 0.02) < 0.002  # 16,384 draws: the sample std is within 1 % of 0.02 (5 sigma: 0.0006)
    assert not double.attn.to_q.bias.any() and bool((double.attn.norm_q.weight == 1).all())


def test_patches_and_positions_are_the_references():
    from training.flux1.model import image_ids, pack_latents, unpack_latents

    x = torch.randn(2, 4, 6, 8)
    assert torch.equal(pack_latents(x), ref_pack_latents(x))
    assert torch.equal(unpack_latents(pack_latents(x), 6, 8), x)
    assert torch.equal(image_ids(6, 8), ref_position_encoding(1, 6, 8)[0])
