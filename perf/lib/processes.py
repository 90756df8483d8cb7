"""The processes a perf command runs in: one, or torchrun's, one a GPU (NCCL) or gloo processes on the CPU.
`start(gpu)` starts a process group always (a world of one too), `start(gpu, group=False)` only under
torchrun with several processes; `say` prints on rank 0 only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Processes:
    device: torch.device
    rank: int
    world: int
    grouped: bool  # a process group was started (`end` closes it)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def say(self, *args, **kwargs) -> None:
        if self.main:
            print(*args, **kwargs)

    def mesh(self):
        """The data-parallel mesh over every process (None for one process): `parallel.build_mesh`."""
        from training.llama.parallel import build_mesh

        return build_mesh(self.device.type, self.world, 1)

    def end(self) -> None:
        if self.grouped:
            dist.destroy_process_group()


def start(gpu: bool, group: bool = True) -> Processes:
    """This process's device (`cuda:LOCAL_RANK`, or the CPU) and its place among torchrun's WORLD_SIZE
    processes, with a process group (NCCL on GPUs, gloo on the CPU) unless `group` is False and it is
    alone."""
    world = int(os.environ.get("WORLD_SIZE", 1))
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    grouped = group or world > 1
    if grouped:
        dist.init_process_group("nccl" if gpu else "gloo", device_id=device if gpu else None)
    rank = dist.get_rank() if grouped else 0
    return Processes(device, rank, world, grouped)
