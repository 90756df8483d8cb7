"""Checks every benchmark's preflight shares: the config the launcher passed, FP8's backend, the GPUs the
config asks for, and the launcher's world size; and the FP8 backend `auto` picks, for the doctor."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from training.common.config import ConfigError, RunSettings


def load_config(cls: type[RunSettings], environ: Mapping[str, str]) -> tuple[RunSettings | None, list[str]]:
    """(the config, its problems): parsed from the environment with the variables the launcher names
    (CONFIG_VARS), and its scale against the launcher's world size; (None, [the error]) if it does not
    parse."""
    try:
        cfg = cls.from_env(environ, environ.get("CONFIG_VARS", "").split())
    except ConfigError as err:
        return None, [str(err)]
    return cfg, cfg.scale_problems(launch_world_size(environ))


def fp8_problems(cfg: RunSettings) -> list[str]:
    """PRECISION=fp8 (or FP8=1) needs a backend here: FP8_BACKEND's (auto: `training.fp8.choose_backend`)."""
    if cfg.requested_precision() != "fp8":
        return []
    from training.fp8 import choose_backend

    try:
        choose_backend(cfg.fp8_backend)
    except ValueError as err:
        return [str(err)]
    return []


def fp8_backend_auto() -> str:
    """What FP8_BACKEND=auto picks on this machine (and why not Transformer Engine, where the image has it),
    or why none."""
    from training.common.backends import importable
    from training.fp8 import choose_backend

    try:
        chosen = choose_backend("auto")
    except ValueError as err:
        return f"none ({err})"
    if chosen == "native" and importable("transformer_engine"):
        why = "has not run on this project's GPUs; native is the path measured and curve-checked"
        chosen += f" (Transformer Engine importable, but {why}: perf/RESULTS.md; FP8_BACKEND=te asks for it)"
    return chosen


def check_gpus(wanted: int, cpu_demo: bool) -> list[str]:
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 0:
        return [] if cpu_demo else [f"no GPU visible, but the config asks for DGXNGPU={wanted}"]
    if visible < wanted:
        return [f"{visible} GPUs visible, but the config asks for DGXNGPU={wanted}"]
    return []


def launch_world_size(environ: Mapping[str, str]) -> int | None:
    """Ranks the launcher starts, where it says (run.sub: LAUNCH_WORLD_SIZE; torchrun: WORLD_SIZE)."""
    raw = environ.get("LAUNCH_WORLD_SIZE") or environ.get("WORLD_SIZE")
    return int(raw) if raw and raw.isdigit() else None
