"""Process group setup for torchrun (or SLURM) launches, and the few collectives the trainers use."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _launch_env() -> dict[str, int]:
    """Rank variables from torchrun, falling back to SLURM's when srun starts one task per GPU."""
    env = os.environ
    if "RANK" not in env and "SLURM_PROCID" in env:
        return {
            "rank": int(env["SLURM_PROCID"]),
            "local_rank": int(env.get("SLURM_LOCALID", 0)),
            "world_size": int(env["SLURM_NTASKS"]),
        }
    return {
        "rank": int(env.get("RANK", 0)),
        "local_rank": int(env.get("LOCAL_RANK", 0)),
        "world_size": int(env.get("WORLD_SIZE", 1)),
    }


def init_distributed() -> DistInfo:
    """Start the process group: NCCL (RCCL on ROCm) when GPUs are visible, gloo on CPU."""
    ranks = _launch_env()
    if torch.cuda.is_available():
        device = torch.device("cuda", ranks["local_rank"])
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if ranks["world_size"] > 1 and not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group(
            backend,
            rank=ranks["rank"],
            world_size=ranks["world_size"],
            device_id=device if backend == "nccl" else None,
        )
    return DistInfo(device=device, **ranks)


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(tensor)
    return tensor


def any_rank(flag: torch.Tensor) -> bool:
    """True on every rank if `flag` (a 0-dim bool tensor) is True on any: ranks that must stop together
    (e.g. on a non-finite loss) agree here, or the others would wait forever in their next collective."""
    return all_reduce_sum(flag.float()).item() > 0


def broadcast_int(value: int, device: torch.device) -> int:
    """Rank 0's value on every rank (used to agree on the run's seed)."""
    if not dist.is_initialized():
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.broadcast(t, 0)
    return int(t.item())


def run_seed(seed: int | None, device: torch.device) -> int:
    """The run's seed on every rank: SEED when set, else one drawn on rank 0."""
    drawn = seed if seed is not None else random.SystemRandom().randrange(2**31)
    return broadcast_int(drawn, device)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def shutdown() -> None:
    """End a run that completed on every rank: wait for all ranks (no collective still in flight), then tear
    the process group down. (BERT's trainer tore down without the barrier, and a rank once died with SIGABRT
    at teardown after a converged run: gloo over two SLURM nodes.) Not for a failing rank: the others would
    wait at the barrier."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
