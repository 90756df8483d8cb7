"""Running cuDNN graphs built with the `nvidia-cudnn-frontend` package's graph API (`import cudnn`) from
PyTorch: one cuDNN handle per GPU, and each execution on PyTorch's current stream (so that it orders with the
surrounding kernels and is captured into CUDA graphs) with a workspace from PyTorch's allocator.

Used by the attention ops no PyTorch API reaches: BERT's ragged attention with dropout and the Llama blocks'
FP8 attention.
"""

from __future__ import annotations

import functools

import torch


def cudnn():
    """The frontend's module (imported on first use: it is installed on NVIDIA images only)."""
    import cudnn as frontend

    return frontend


@functools.cache
def handle(device_index: int):
    return cudnn().create_handle()


def scalar(graph, name: str, data_type=None):
    """A (1, 1, 1, 1) input of `graph`, float32 unless `data_type` says otherwise."""
    return graph.tensor(
        name=name, dim=(1, 1, 1, 1), stride=(1, 1, 1, 1), data_type=data_type or cudnn().data_type.FLOAT
    )


def plan(graph) -> None:
    """Validate `graph`, then pick and build its execution plans (cuDNN's heuristics, then its fallback)."""
    frontend = cudnn()
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([frontend.heur_mode.A, frontend.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()


def execute(graph, tensors: dict, data: dict, device: torch.device) -> None:
    """Run `graph` on the current stream: `tensors` maps names to the graph's tensors, `data` names to the
    PyTorch tensors bound to them."""
    h = handle(device.index or 0)
    cudnn().set_stream(h, torch.cuda.current_stream(device).cuda_stream)
    workspace = torch.empty(graph.get_workspace_size(), dtype=torch.uint8, device=device)
    graph.execute({tensors[n]: x for n, x in data.items()}, workspace, handle=h)
