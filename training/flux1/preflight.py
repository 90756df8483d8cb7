"""Flux.1's preflight: `check(environ) -> list[str]`, run by `python -m training.preflight` before the runs.

Seconds, not minutes: the config parses, its schedule has an evaluation before the run stops (else that alone
is said: `training.common.preflight.load_config`), its arithmetic fits the machine (DGXSYSTEM's NxGxMBS, nodes
x GPUs against the launcher, a global batch that splits into micro-batches), the three data folders open with
the trainer's own reader and hold enough rows for the ranks, diffusers is importable, the FP8 backend asked
for exists here, and the node has the GPUs the config asks for. (The prepared data's layout is checked by the
data verifier the benchmark table names, which the preflight runs next.)
"""

from __future__ import annotations

from collections.abc import Mapping

from training.common.backends import importable
from training.common.config import ConfigError
from training.common.preflight import check_gpus, launch_world_size, load_config


def check(environ: Mapping[str, str]) -> list[str]:
    from training.flux1 import data
    from training.flux1.config import FluxConfig

    cfg, scale = load_config(FluxConfig, environ)
    if cfg is None:
        return scale
    problems = list(scale)
    world = launch_world_size(environ) or cfg.world_size()
    try:
        cfg.grad_accum(world)
    except ConfigError as err:
        problems.append(str(err))
    if not importable("diffusers"):
        problems.append(
            "diffusers is not installed (pip install diffusers): its FluxTransformer2DModel is the model"
        )
    paths = cfg.paths()
    missing = [f"{name} data {path} does not exist" for name, path in paths.items() if not path.exists()]
    if missing:
        return problems + missing
    try:
        train = data.EncodedImages(paths["train"])
        data.EncodedImages(paths["valid"])
        data.load_empty_encodings(paths["empty"])
        train.sample_shapes()
    except data.DataError as err:
        return problems + [str(err)]
    if len(train) < world:
        problems.append(f"{len(train)} training rows in {paths['train']} cannot feed {world} ranks")
    from training.fp8 import backend_problems

    problems += backend_problems(cfg.requested_precision(), cfg.fp8_backend)
    return problems + check_gpus(cfg.gpus_per_node, cfg.is_cpu_demo)


def report() -> list[tuple[str, str]]:
    """What this benchmark would use on this machine, for the doctor."""
    model = "diffusers FluxTransformer2DModel" if importable("diffusers") else "none (diffusers missing)"
    return [("model", model), ("attention", "SDPA"), ("optimizer", "AdamW, torch fused / foreach")]
