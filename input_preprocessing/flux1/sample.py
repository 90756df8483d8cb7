"""The small default's data: a made-up captioned-image set in the published layout (`layout.py`), at small
shapes, from a seed (nothing downloaded).

    python -m input_preprocessing.flux1.sample --outputdir /data/flux_demo

Not CC12M or COCO: a run on it is a demo, never an MLPerf result. There are --captions made-up captions, each
with its own T5 sequence [--text-length, --text-width], pooled CLIP embedding [--text-width] and picture: a
smooth latent [16, --latent-side, --latent-side] (a 2x2 grid of random values, bilinearly upsampled), stored
as the VAE posterior's mean and log-variance so that each map of the trainer's normalized latent, (mean -
0.1159) x 0.3611, has unit standard deviation, with a posterior spread of 0.05. Each image is its caption's
encodings and picture with small perturbations of its own, so the picture can be learned from the text: the
validation loss falls from 1 + E[x0^2] (what a model that predicts nothing scores) as it is. The COCO-like
validation split tags its rows with timesteps 0..7 in turn, each equally often, as the published one.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from input_preprocessing.common.runtime import log
from input_preprocessing.flux1 import layout

SHIFT, SCALE = 0.1159, 0.3611  # FLUX.1's VAE latent shift and scale (the trainer's normalization)
LATENT_CHANNELS = 16
POSTERIOR_STD = 0.05  # of the normalized latent
CAPTION_NOISE, PICTURE_NOISE = 0.1, 0.2


def make_sample(
    outputdir: Path,
    train_rows: int = 4096,
    valid_rows: int = 512,
    captions: int = 8,
    text_length: int = 16,
    text_width: int = 64,
    latent_side: int = 8,
    seed: int = 1234,
) -> dict:
    """Write `cc12m_preprocessed/`, `coco_preprocessed/` and `empty_encodings/` under `outputdir`."""
    if valid_rows % layout.EVAL_TIMESTEPS:
        raise ValueError(
            f"--valid-rows {valid_rows}: a multiple of {layout.EVAL_TIMESTEPS} (each timestep equally)"
        )
    if latent_side % 2:
        raise ValueError(f"--latent-side {latent_side}: even (the transformer takes 2x2 patches)")
    g = torch.Generator().manual_seed(seed)
    t5 = torch.randn(captions, text_length, text_width, generator=g)
    clip = torch.randn(captions, text_width, generator=g)
    pictures = smooth(torch.randn(captions, LATENT_CHANNELS, 2, 2, generator=g), latent_side)
    logvar = torch.full((LATENT_CHANNELS, latent_side, latent_side), 2 * math.log(POSTERIOR_STD / SCALE))

    def rows(n: int, tag_timesteps: bool, prefix: str) -> list[dict]:
        out = []
        for i in range(n):
            c = int(torch.randint(captions, (1,), generator=g))
            picture = (
                pictures[c]
                + PICTURE_NOISE * smooth(torch.randn(1, LATENT_CHANNELS, 2, 2, generator=g), latent_side)[0]
            )
            out.append(
                {
                    "__key__": f"{prefix}{i:09d}",
                    "t5_encodings": t5[c] + CAPTION_NOISE * torch.randn(t5[c].shape, generator=g),
                    "clip_encodings": clip[c] + CAPTION_NOISE * torch.randn(clip[c].shape, generator=g),
                    "mean": SHIFT + picture / SCALE,
                    "logvar": logvar,
                    "timestep": i % layout.EVAL_TIMESTEPS if tag_timesteps else None,
                }
            )
        return out

    layout.write_split(outputdir / layout.TRAIN, rows(train_rows, False, "train"))
    layout.write_split(outputdir / layout.VALID, rows(valid_rows, True, "val"))
    empty_t5 = torch.randn(text_length, text_width, generator=g)
    layout.write_empty(outputdir / layout.EMPTY, empty_t5, torch.randn(text_width, generator=g))
    return {
        "train_rows": train_rows,
        "valid_rows": valid_rows,
        "t5": [text_length, text_width],
        "latent": [LATENT_CHANNELS, latent_side, latent_side],
    }


def smooth(grid: torch.Tensor, side: int) -> torch.Tensor:
    """[n, c, 2, 2] -> [n, c, side, side], bilinear, each map scaled back to unit standard deviation."""
    up = F.interpolate(grid, size=(side, side), mode="bilinear", align_corners=True)
    return up / up.std(dim=(2, 3), keepdim=True).clamp_min(1e-6)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m input_preprocessing.flux1.sample",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--outputdir", type=Path, required=True)
    parser.add_argument("--train-rows", type=int, default=4096)
    parser.add_argument("--valid-rows", type=int, default=512)
    parser.add_argument("--captions", type=int, default=8)
    parser.add_argument("--text-length", type=int, default=16)
    parser.add_argument("--text-width", type=int, default=64)
    parser.add_argument("--latent-side", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    try:
        made = make_sample(
            args.outputdir.resolve(),
            args.train_rows,
            args.valid_rows,
            args.captions,
            args.text_length,
            args.text_width,
            args.latent_side,
            args.seed,
        )
    except ValueError as err:
        print(f"sample: error: {err}", file=sys.stderr)
        return 2
    log(f"[sample] {made} -> {args.outputdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
