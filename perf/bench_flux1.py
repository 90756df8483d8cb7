"""The Flux.1 benchmark's training step on one GPU: ours (the trainer's own `build_step` and `train_step`)
beside diffusers' training loop, same run, same weights, same inputs.

    python -m perf.bench_flux1 [--double 4 --single 8] [--batch 8] [--steps 10] [--config FILE]
        [--set 'COMPILE_DIT=1 ACTIVATION_CHECKPOINTING=1 PRECISION=fp8 ...']
    python -m perf.bench_flux1 --tiny          # on the CPU, the toy shape (a check that it runs)

The full MMDiT (19 double, 38 single blocks, 11.9 B parameters) with fp32 AdamW state needs about 190 GB: it
does not fit one GPU, so the bench runs a reduced depth of the full width (--double / --single; the
throughput per block scales to the full model by the block counts). Inputs are the published shapes (T5
[256, 4096], pooled CLIP [768], the VAE posterior [16, 32, 32]), random, rotated over a pool of batches.

Ours: `training.flux1.build.build_step` (BF16 autocast in one process, fp32 master weights, fused AdamW with
decay on every parameter, clip 1.0), the step of `training.flux1.step`, with the features the flux1 config
asks for (`--config`, else its defaults, then `--set` in the config's own names: `COMPILE_DIT`,
`ACTIVATION_CHECKPOINTING`, `PRECISION`, `FP8_BACKEND`, ...; `perf/lib/overrides.py`). Peer: the
loop of diffusers' Flux training examples (`train_dreambooth_flux.py`): the latents packed and their ids made
by `FluxPipeline._pack_latents` / `_prepare_latent_image_ids`, the prediction unpacked by
`FluxPipeline._unpack_latents`, bf16 autocast, `F.mse_loss(pred.float(), target.float())`, backward,
`clip_grad_norm_`, `torch.optim.AdamW(fused=True)`; built from the same seed (the same initial weights; the
two run one after the other: both with their AdamW state do not fit one GPU), with the same draws (the
posterior's eps, the noise, the time t, in our step's order) from a generator of the same seed.

Loss parity (`perf/lib/parity.py`): the peer's per-step losses (every step, warm-up included) against ours,
bf16's tolerance; the flow-matching loss has no uniform value (the degenerate check is off). Prints a table
and writes JSON to $OUT/bench_flux1.json when OUT is set; exits 1 when the losses part.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shlex
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from perf.lib import overrides, parity
from perf.lib.timing import time_steps
from training.common import dist
from training.flux1.build import Features, Optim, build_step, resolve_precision
from training.flux1.config import ADAMW_BETAS, ADAMW_EPS, GRAD_CLIP_NORM, WEIGHT_DECAY, FluxConfig
from training.flux1.model import PRESETS
from training.flux1.step import Batch, Draws, calibrate_fp8, clean_latents, train_step

SEED, LR = 0, 2e-4
POOL = 4  # distinct batches, rotated


def batches(shape, n: int, device: torch.device) -> list[Batch]:
    g = torch.Generator(device="cpu").manual_seed(1)
    side = 32 if shape.text_width == 4096 else 8
    text = 256 if shape.text_width == 4096 else 16

    def one() -> Batch:
        return Batch(
            torch.randn(n, text, shape.text_width, generator=g),
            torch.randn(n, shape.pooled_width, generator=g),
            2 * torch.randn(n, shape.latent_channels, side, side, generator=g),
            -6 + torch.randn(n, shape.latent_channels, side, side, generator=g),
        )

    return [one() for _ in range(POOL)]


def peer_step(model, optimizer, draws: Draws, dtype: torch.dtype, autocast):
    """diffusers' Flux training loop on one batch (see the module docstring)."""
    from diffusers import FluxPipeline

    def step(batch: Batch) -> torch.Tensor:
        batch = batch.to(draws.generator.device, dtype)
        x0 = clean_latents(batch.mean, batch.logvar, draws.normal(batch.mean))
        noise = draws.normal(x0)
        t = draws.uniform(x0.shape[0], x0)
        b, c, h, w = x0.shape
        noisy = (1.0 - t.view(-1, 1, 1, 1)) * x0 + t.view(-1, 1, 1, 1) * noise
        packed = FluxPipeline._pack_latents(noisy, b, c, h, w)
        ids = FluxPipeline._prepare_latent_image_ids(b, h // 2, w // 2, x0.device, x0.dtype)
        txt_ids = torch.zeros(batch.t5.shape[1], 3, device=x0.device, dtype=x0.dtype)
        with autocast:
            pred = model(
                hidden_states=packed,
                timestep=t,
                pooled_projections=batch.clip,
                encoder_hidden_states=batch.t5,
                txt_ids=txt_ids,
                img_ids=ids,
                return_dict=False,
            )[0]
        # diffusers' _unpack_latents takes the image size in pixels (vae_scale_factor 8)
        pred = FluxPipeline._unpack_latents(pred, h * 8, w * 8, 8)
        loss = F.mse_loss(pred.float(), (noise - x0).float(), reduction="mean")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP_NORM)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--double", type=int, default=4, help="double blocks (the full model: 19)")
    ap.add_argument("--single", type=int, default=8, help="single blocks (the full model: 38)")
    ap.add_argument("--batch", type=int, default=8, help="images per step")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--config", type=Path, help="a flux1 config file whose settings ours takes")
    ap.add_argument(
        "--set", default="", metavar="'NAME=VALUE ...'", help="ours: the config's settings changed"
    )
    ap.add_argument("--tiny", action="store_true", help="the toy shape on this machine's device (CPU: fp32)")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # what the bench sets itself: no data read (DATADIR never opened), its batch, its fixed LR
    bench_values = {"DATADIR": "/nonexistent", "BATCHSIZE": str(args.batch), "MBS": str(args.batch)}
    bench_values["LEARNING_RATE"] = str(LR)
    try:
        changes = overrides.parse(shlex.split(args.set))
        start = overrides.base("flux1", args.config, bench_values)
        cfg = overrides.build(FluxConfig, start, changes)
    except (overrides.OverrideError, ValueError) as err:
        raise SystemExit(f"bench_flux1: {err}") from None
    info = dist.DistInfo(rank=0, local_rank=0, world_size=1, device=device)
    base = PRESETS["tiny"] if args.tiny else PRESETS["schnell"]
    shape = base.replace(double_layers=args.double, single_layers=args.single)
    precision = "bf16" if device.type == "cuda" else "fp32"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    ours_precision = resolve_precision(cfg.requested_precision(), device)
    optim = Optim(LR, ADAMW_BETAS, ADAMW_EPS, WEIGHT_DECAY, GRAD_CLIP_NORM)
    pool = batches(shape, args.batch, device)
    autocast = torch.autocast("cuda", torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    results, applied, params = {}, {}, 0
    # one at a time (two reduced models with their AdamW state do not fit one GPU together); each built
    # from the same seed: the same initial weights
    for name in ("ours", "diffusers"):
        if name == "ours":
            features = Features(ours_precision, cfg.activation_checkpointing, cfg.compile, cfg.fp8_settings())
            ours, applied = build_step(shape, features, optim, info, SEED)
            calibrate_fp8(ours, pool[0])
            params = sum(p.numel() for p in ours.params)

            def run(i: int, ours=ours) -> torch.Tensor:
                return train_step(ours, [pool[i % POOL]], LR)[0]
        else:
            model = build_step(shape, Features(precision), optim, info, SEED)[0].model
            opt = torch.optim.AdamW(
                model.parameters(),
                lr=LR,
                betas=ADAMW_BETAS,
                eps=ADAMW_EPS,
                weight_decay=WEIGHT_DECAY,
                fused=device.type == "cuda",
            )
            peer = peer_step(model, opt, Draws(SEED, 0, "train", device), dtype, autocast)

            def run(i: int, peer=peer) -> torch.Tensor:
                return peer(pool[i % POOL])

        losses, count = [], [0]

        def step(run=run, losses=losses, count=count):
            losses.append(run(count[0]))
            count[0] += 1

        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        times = time_steps(step, args.warmup, args.steps, device)
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
        ms = statistics.median(times)
        results[name] = {
            "ms_per_step": ms,
            "images_per_s": args.batch / ms * 1e3,
            "peak_gib": peak,
            "losses": parity.as_floats(losses),
        }
        ours = model = opt = peer = run = step = None  # free this variant before the next is built
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    kind = "fp8" if ours_precision == "fp8" else "bf16"  # FP8's wider tolerance where ours runs FP8 GEMMs
    check = parity.verdict(
        results["diffusers"]["losses"],
        results["ours"]["losses"],
        uniform=float("nan"),
        kind=kind,
        reference_name="ours",
    )
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    blocks = f"{shape.double_layers} double + {shape.single_layers} single blocks"
    print(
        f"{gpu}: {blocks} ({params / 1e6:,.0f} M parameters), batch {args.batch}, {ours_precision}, ours: "
        f"compile {applied['compile']}, AC {applied['activation_checkpointing']}"
    )
    print("| variant | ms/step | images/s | peak GiB | first loss | last loss |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, r in results.items():
        print(
            f"| {name} | {r['ms_per_step']:.1f} | {r['images_per_s']:.2f} | {r['peak_gib']:.1f} | "
            f"{r['losses'][0]:.4f} | {r['losses'][-1]:.4f} |"
        )
    ratio = results["diffusers"]["ms_per_step"] / results["ours"]["ms_per_step"]
    print(f"ours / diffusers speed: {ratio:.2f}x; diffusers' losses against ours: {parity.column(check)}")
    if os.environ.get("OUT"):
        record = {
            "gpu": gpu,
            "shape": str(shape),
            "batch": args.batch,
            "precision": precision,
            "config": str(args.config) if args.config else None,
            "overrides": changes,
            "applied": applied,
            "results": results,
            "parity": check,
            "speed_ratio": ratio,
        }
        Path(os.environ["OUT"], "bench_flux1.json").write_text(json.dumps(record, indent=2, default=str))
    return 0 if check["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
