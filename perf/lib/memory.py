"""The memory marks of one training step (the LoRA bench's memory step): what the forward leaves for the
backward, the weights FSDP2 still holds all-gathered as the backward reaches each block, and, on GPUs, where
in the step the allocator's peak fell.
"""

from __future__ import annotations

import contextlib

import torch

from perf.lib.timing import take_peak
from training.throughput.memory import memory_at_forward_end


def gathered_bytes(blocks: list[torch.nn.Module]) -> int:
    """Bytes of FSDP2's unsharded (all-gathered) parameter storages allocated now, over `blocks`. Read from
    FSDP2's private `FSDPParam` fields (`_unsharded_param`, `all_gather_outputs`, `_unsharded_inner_tensors`,
    torch 2.11), read only; a field that is absent counts 0."""
    seen, total = set(), 0
    for block in blocks:
        state = block._get_fsdp_state() if hasattr(block, "_get_fsdp_state") else None
        for param in getattr(getattr(state, "_fsdp_param_group", None), "fsdp_params", []):
            inner = getattr(param, "_unsharded_inner_tensors", None) or []
            for t in (
                getattr(param, "_unsharded_param", None),
                *getattr(param, "all_gather_outputs", []),
                *inner,
            ):
                storage = None if t is None else t.untyped_storage()
                if storage is not None and storage.nbytes() and storage.data_ptr() not in seen:
                    seen.add(storage.data_ptr())
                    total += storage.nbytes()
    return total


def memory_step(run, model: torch.nn.Module, device: torch.device) -> dict:
    """One step watched: what its forward leaves for the backward (GPU), and, each time the backward reaches a
    block (its output's gradient arrives: every later block's backward has run), the all-gathered weights
    still allocated and (GPU) all memory allocated: where a kept block's backward left its gathered weights,
    they would pile up towards block 0 (on 4 x H200 they do not: a kept block's 3.25 GiB of the first step's
    peak is the FP8 calibration pass, `training.fp8.calibrate`). On GPUs also where in the
    step the peak fell: the allocator's peak is read and reset at each mark (a block's forward starting and
    ending, the model's forward ending, the backward reaching a block, the step ending), so each stretch
    between two marks has its own peak (`peak_between`: the largest, and the marks around it). A block's
    forward after the model's is its recompute in the backward."""
    blocks, reached = list(getattr(model, "layers", [])), {}
    gpu = device.type == "cuda"
    marks: list[tuple[str, float]] = []  # (the mark, the peak in GiB since the one before)
    phase = ["forward"]

    def now() -> tuple[float, float | None]:
        allocated = torch.cuda.memory_allocated(device) / 2**30 if gpu else None
        return gathered_bytes(blocks) / 2**30, allocated

    @torch.compiler.disable  # called from compiled blocks' hooks: each label would be a recompile of its own
    def mark(label: str) -> None:
        if gpu:
            marks.append((label, take_peak(device)))

    def starts(i: int):
        return lambda module, args: mark(f"{phase[0]} of block {i} starts")

    def watch(i: int):
        def record(grad: torch.Tensor) -> None:
            reached.setdefault(i, now())
            mark(f"the backward reaches block {i}")

        def hook(module, args, out):
            mark(f"{phase[0]} of block {i} ends")
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(record)

        return hook

    def forward_ends(*_):
        mark("the model's forward ends")
        phase[0] = "recompute"

    handles = [block.register_forward_pre_hook(starts(i)) for i, block in enumerate(blocks)]
    handles += [block.register_forward_hook(watch(i)) for i, block in enumerate(blocks)]
    handles.append(model.register_forward_hook(forward_ends))
    try:
        with memory_at_forward_end(model, device) if gpu else contextlib.nullcontext([0]) as kept:
            before = torch.cuda.memory_allocated(device) if gpu else 0
            mark("the step starts")
            run()
            mark("the step ends")
    finally:
        for handle in handles:
            handle.remove()
    at = [reached.get(i, (None, None)) for i in range(len(blocks))]
    out = {"backward_gathered_gib": [gathered for gathered, _ in at]}
    if gpu:
        out["kept_after_forward_gib"] = (kept[0] - before) / 2**30
        out["backward_allocated_gib"] = [allocated for _, allocated in at]
        top = max(range(1, len(marks)), key=lambda k: marks[k][1])
        out["peak_between"] = {"gib": marks[top][1], "from": marks[top - 1][0], "to": marks[top][0]}
        forward_end = next(k for k, (label, _) in enumerate(marks) if "model" in label)
        out["forward_peak_gib"] = max(gib for _, gib in marks[1 : forward_end + 1])
    return out


def memory_line(run: dict) -> str | None:
    """The memory step's figures (`memory_step`) in a line: what the forward left, and the all-gathered
    weights (and, on GPUs, all memory) as the backward reached the last block and block 0."""
    gathered, allocated = run.get("backward_gathered_gib") or [], run.get("backward_allocated_gib") or []
    if not gathered or gathered[0] is None or gathered[-1] is None:
        return None
    parts = (
        [f"the forward left {run['kept_after_forward_gib']:.3g} GiB"]
        if "kept_after_forward_gib" in run
        else []
    )
    for where, i in (("the last block", -1), ("block 0", 0)):
        held = f"{gathered[i]:.3g} GiB gathered"  # (3 digits: the CPU toy's are a few KiB)
        if allocated and allocated[i] is not None:
            held += f", {allocated[i]:.3g} GiB allocated"
        parts.append(f"as the backward reached {where}: {held}")
    if run.get("first_step_peak_gib"):
        parts.append(
            f"the first step's peak {run['first_step_peak_gib']:.3g} GiB, the later steps' "
            f"{run['peak_gib']:.3g}"
        )
    if peak := run.get("peak_between"):
        parts.append(
            f"the forward's peak {run['forward_peak_gib']:.3g} GiB; the step's "
            f"{peak['gib']:.3g} GiB, between '{peak['from']}' and '{peak['to']}'"
        )
    return "; ".join(parts)
