"""Checks every benchmark's preflight shares: the GPUs the config asks for, and the launcher's world size."""

from __future__ import annotations

from collections.abc import Mapping

import torch


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
