"""Checks every benchmark's preflight shares: the config the launcher passed, the GPUs the config asks for,
and the launcher's world size. (FP8's backend is checked by `training.fp8.backend_problems`.)"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from training.common import vendor_vars
from training.common.config import ConfigError, RunSettings


class NoEvaluation(ConfigError):
    """A config whose run would stop before its first evaluation, so could never reach its target: said in
    one line (`RunSettings.no_evaluation`), before any data is read."""


def load_config(cls: type[RunSettings], environ: Mapping[str, str]) -> tuple[RunSettings | None, list[str]]:
    """(the config, its problems): parsed from the environment with the variables the launcher names
    (CONFIG_VARS), and its scale against the launcher's world size; (None, [the error]) if it does not
    parse. Raises NoEvaluation where its schedule has no evaluation before the run stops. Prints the vendor
    names it honored and those not applicable here, and what runs otherwise than the config asks
    (`substitutions`; once per launch: the preflight runs once)."""
    try:
        cfg = cls.from_env(environ, environ.get("CONFIG_VARS", "").split())
    except ConfigError as err:
        return None, [str(err)]
    for line in vendor_vars.describe(cfg.vendor_names):
        print(f"preflight: {line}")
    world = launch_world_size(environ)
    for line in cfg.substitutions(world or cfg.world_size()):
        print(f"preflight: runs otherwise than its config: {line}")
    if why := cfg.no_evaluation(world or cfg.world_size()):
        raise NoEvaluation(why)
    return cfg, cfg.scale_problems(world)


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
