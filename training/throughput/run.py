"""One throughput run, top to bottom: read the flags and the model config, start the process group, build the
model family's workload (`llm`, `flux`), size the batch if asked (`--batch_size auto`), run the optimizer
steps with a line each (loss, time, throughput, ETA), then the summary: tokens (images) per second per GPU,
TFLOP/s per GPU in both accountings (`flops.py`), peak memory, the settings and backends, and the figure
beside AMD's published one (`published.py`). Exit status: 0 done, 1 the model does not fit, 2 a flag or
config error.
"""

from __future__ import annotations

import gc
import json
import math
import os
import re
import statistics
import sys
import time

import torch

from training.common import backends, dist
from training.common.config import ConfigError
from training.common.files import write_text_atomic
from training.llama import parallel
from training.throughput import published
from training.throughput.config import ModelSpec, RunArgs, check_writable, model_for, parse_args
from training.throughput.flops import fmt
from training.throughput.memory import CannotFit, check_this_node, launch_sizes, memory_at_forward_end
from training.throughput.workload import Workload

# a CPU run's comparison: none, and why
NOT_COMPARED = {
    "gpu": None,
    "why": "no GPU here: AMD's figures are per GPU, a CPU's are not comparable",
    "row": None,
}
MEMORY_MARGIN = 0.92  # --batch_size auto: the predicted peak stays under this share of the GPU's memory


class DoesNotFit(RuntimeError):
    """The step ran out of GPU memory: the message names the batch size and the memory asked for."""

    @classmethod
    def from_oom(
        cls, err: Exception | str, name: str, batch: int, device: torch.device, when: str = ""
    ) -> DoesNotFit:
        total = torch.cuda.get_device_properties(device).total_memory / 2**30
        gpu = f"{torch.cuda.get_device_name(device)} ({total:.1f} GiB, rank {dist_rank()})"
        held = torch.cuda.memory_allocated(device) / 2**30
        return cls(does_not_fit(name, batch, gpu + when, str(err), held))


def does_not_fit(name: str, batch: int, where: str, oom: str, held_gib: float) -> str:
    """The message for a step out of memory; `oom` is PyTorch's ("Tried to allocate 2.00 GiB. GPU 0 ... Of
    the allocated memory 75.30 GiB is allocated by PyTorch, and 2.19 GiB is reserved ..."), whose figures
    are those of the moment it failed; `held_gib` (allocated when the error was caught) stands in without."""
    size = r"([\d.]+ [KMGT]?i?B)"
    asked = re.search(rf"Tried to allocate {size}", oom)
    held = re.search(rf"Of the allocated memory {size} is allocated by PyTorch, and {size} is reserved", oom)
    holding = (
        f"{held.group(1)} allocated by PyTorch and {held.group(2)} reserved but unallocated"
        if held
        else f"{held_gib:.1f} GiB already allocated"
    )
    return (
        f"{name} does not fit at batch size {batch} per GPU on {where}: the step asked for "
        f"{asked.group(1) if asked else 'more memory'} with {holding}. Try a smaller --batch_size, "
        "--batch_size auto, --activation_checkpointing True, --reduce_each_iteration True, or more GPUs."
    )


def dist_rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def build(spec: ModelSpec, args: RunArgs, device: torch.device, mesh, world: int) -> Workload:
    if spec.model_type == "flux":
        from training.throughput import flux

        return flux.build(spec, args, device, mesh, world)
    from training.throughput import llm

    return llm.build(spec, args, device, mesh, world)


def largest_batch(peak_at_1: float, per_item: float, budget: float, limit: int = 1024) -> int:
    """The largest batch whose peak memory, `peak_at_1` plus `per_item` for each element past the first,
    stays within `budget` (at least 1, at most `limit`). No growth measured (`per_item` <= 0) predicts
    nothing: 2, the largest batch that ran (not `limit`, which ran out of memory for FLUX.1)."""
    if per_item <= 0:
        return min(2, limit)
    return max(1, min(limit, math.floor((budget - peak_at_1) / per_item) + 1))


def growth_per_item(peaks: tuple[float, float], saved: tuple[float, float]) -> float:
    """Memory one more batch element costs, from the steps at batch 1 and 2: the larger of the peaks'
    growth and of the growth of what the first forward left allocated for its backward. The peak alone
    can hide it: FLUX.1's 12-block step peaked at 38.2 GiB at both batches on an H100 and an H200 (the
    gradients and AdamW's state outweigh the activations of a few images), which extrapolated to batch
    1,024 and ran out of memory."""
    return max(peaks[1] - peaks[0], saved[1] - saved[0])


def choose_batch(workload: Workload, args: RunArgs, device: torch.device) -> tuple[int, str]:
    """`--batch_size auto`: one optimizer step each at batch 1 (twice: the first creates AdamW's state, whose
    one-off peak is not the steps') and 2 (two iterations per step where the run accumulates, so that the
    accumulated gradients are counted), then the largest batch whose predicted peak (`growth_per_item`)
    stays under MEMORY_MARGIN of this GPU's memory. The ranks agree on the measures (the largest) and the
    budget (the smallest). Batch 1 out of memory ends the run with the error; batch 2 out of memory settles
    on 1 (seen with Mistral 7B FP8 at 16 blocks on one H100); the run itself out of memory, if the
    prediction was wrong, ends with an error naming the batch."""
    if device.type != "cuda":
        raise ConfigError("--batch_size auto sizes the batch to GPU memory: on the CPU give a number")
    accum = min(args.grad_accum, 2)
    peaks, saved = [], []
    with memory_at_forward_end(workload.model, device) as at_forward_end:
        for batch in (1, 1, 2):
            step = workload.make_step(batch, accum)
            torch.cuda.reset_peak_memory_stats(device)
            at_forward_end.clear()
            before = torch.cuda.memory_allocated(device)
            failed = None
            try:
                step()
                torch.cuda.synchronize(device)
            except torch.cuda.OutOfMemoryError as err:
                failed = str(err)  # not the exception: its traceback holds the step's activations
            del step
            gc.collect()
            if all_ranks(float(failed is not None), "max") > 0:
                if batch == 1:
                    if failed is None:  # another rank ran out
                        raise DoesNotFit(f"{workload.name} does not fit at batch size 1 on another rank")
                    raise DoesNotFit.from_oom(failed, workload.name, 1, device, " (sizing --batch_size auto)")
                torch.cuda.empty_cache()
                why = failed.splitlines()[0][:120] if failed else "on another rank"
                at_1 = peaks[-1] / 2**30
                return 1, f"auto: peak {at_1:.1f} GiB at batch 1, batch 2 out of memory ({why}) -> 1"
            peaks.append(all_ranks(torch.cuda.max_memory_allocated(device), "max"))
            saved.append(all_ranks(at_forward_end[0] - before if at_forward_end else 0, "max"))
    # the first step's peak includes creating the optimizer's state
    per_item = growth_per_item((peaks[1], peaks[2]), (saved[1], saved[2]))
    free, total = torch.cuda.mem_get_info(device)
    budget = all_ranks((free + torch.cuda.memory_reserved(device)) * MEMORY_MARGIN, "min")
    batch = largest_batch(peaks[1], per_item, budget)
    torch.cuda.empty_cache()
    gib = 2**30
    note = (
        f"auto: peaks {peaks[1] / gib:.1f} and {peaks[2] / gib:.1f} GiB at batch 1 and 2, the forward's "
        f"saved tensors {saved[1] / gib:.1f} and {saved[2] / gib:.1f} GiB: {per_item / gib:.2f} GiB per "
        f"{workload.unit}; {budget / gib:.1f} GiB usable ({MEMORY_MARGIN:.0%} of what is free to PyTorch) "
        f"-> {batch}"
    )
    return batch, note


def all_ranks(value: float, op: str) -> float:
    if not torch.distributed.is_initialized():
        return value
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    reduce = torch.distributed.ReduceOp.MAX if op == "max" else torch.distributed.ReduceOp.MIN
    torch.distributed.all_reduce(t, op=reduce)
    return float(t.item())


def clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def measure(spec: ModelSpec, args: RunArgs, info: dist.DistInfo) -> dict:
    device, world, main = info.device, info.world_size, info.is_main
    # fixed shapes: each batch size of the auto search compiles its own static graph, none goes dynamic
    torch._dynamo.config.automatic_dynamic_shapes = False
    dist.seed_everything(args.seed)  # the same on every rank: the weights are initialized shard by shard
    mesh = parallel.build_mesh(device.type, world, 1)
    workload = build(spec, args, device, mesh, world)
    batch, sizing = args.batch_size, ""
    if batch is None:
        batch, sizing = choose_batch(workload, args, device)
    step = workload.make_step(batch, args.grad_accum)
    say = print if main else (lambda *a, **k: None)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    seq = f"sequence {workload.seq}, " if workload.seq else ""
    on_gpu = device.type == "cuda"
    per = "GPU" if on_gpu else "process"  # a CPU run's figures are per process
    if not on_gpu:
        say(
            "no GPU here: running on the CPU in fp32 with gloo, to try the command; its figures are per "
            "process and not comparable with AMD's, which are per GPU",
            flush=True,
        )
    say(
        f"{spec.name} ({spec.path}, {spec.model_type}): {world} x {gpu}, {seq}batch {batch} "
        f"per {per}, {args.grad_accum} iteration(s) per optimizer step, {args.steps} steps "
        f"({args.warmup_steps} to warm up)",
        flush=True,
    )
    conf = [
        f"{k}={os.environ[k]}" for k in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF") if k in os.environ
    ]
    workload.backends["allocator"] = ", ".join(conf) or "PyTorch's default"
    for key, value in {**workload.backends, **({"batch_size": sizing} if sizing else {})}.items():
        say(f"  {key}: {value}")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    per_step = batch * args.grad_accum  # elements per GPU per optimizer step
    times: list[float] = []
    for i in range(args.steps):
        start = time.perf_counter()
        try:
            loss = float(step())  # waits for the step's kernels
        except torch.cuda.OutOfMemoryError as err:
            raise DoesNotFit.from_oom(err, spec.name, batch, device) from None
        times.append(time.perf_counter() - start)
        recent = times[1:] or times  # the first step compiles
        eta = (args.steps - i - 1) * statistics.mean(recent)
        rate = per_step / times[-1]
        rates = {k: rate * f / 1e12 for k, f in workload.flops_per_item.items()}
        first, last = i * args.grad_accum + 1, (i + 1) * args.grad_accum
        span = f"iteration {last}" if first == last else f"iterations {first}-{last}"
        say(
            f"step {i + 1}/{args.steps} ({span}/{args.num_iteration}) loss {loss:.4f} | "
            f"{times[-1] / args.grad_accum:.3f} s/iteration | "
            f"{rate * workload.tokens_per_item:,.0f} tokens/s/{per}"
            + "".join(f" | {fmt(v)} TFLOP/s/{per} ({k})" for k, v in rates.items())
            + f" | ETA {clock(eta)}"
            + (" (warm-up)" if i < args.warmup_steps else ""),
            flush=True,
        )
    measured = times[args.warmup_steps :]
    step_s = statistics.mean(measured)  # the mean, as AMD's script
    rate = per_step / step_s
    peak = all_ranks(torch.cuda.max_memory_allocated(device), "max") if device.type == "cuda" else None
    capacity = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    precision = "fp8" if args.enable_fp8 else "bf16"
    result = {
        "model": spec.name,
        "config": str(spec.path),
        "model_type": spec.model_type,
        "precision": precision,
        "compute": workload.compute,
        "device": gpu,
        "per": per,
        "world_size": world,
        "batch_size": batch,
        "seq_len": workload.seq,
        "grad_accum": args.grad_accum,
        "iterations": args.num_iteration,
        "measured_steps": len(measured),
        "step_s": step_s,
        "iteration_s": step_s / args.grad_accum,
        "step_spread_s": [min(measured), max(measured)],
        f"{workload.unit}s_per_s_per_gpu": rate,
        "tokens_per_s_per_gpu": rate * workload.tokens_per_item,
        "tflops_per_gpu": {k: rate * f / 1e12 for k, f in workload.flops_per_item.items()},
        "accountings": workload.accountings,
        "peak_gib": peak / 2**30 if peak is not None else None,
        "capacity_gib": capacity / 2**30 if capacity is not None else None,
        "parameters": workload.params,
        "reduced_depth": f"{workload.blocks} blocks (--num_layers {args.num_layers})"
        if args.num_layers
        else None,
        "backends": {**workload.backends, **({"batch_size": sizing} if sizing else {})},
        "versions": versions(),
        "published": compare(spec, workload, precision, gpu, capacity, rate)
        if on_gpu
        else dict(NOT_COMPARED),
    }
    if main:
        print(summary(result), flush=True)
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    return result


def compare(spec: ModelSpec, workload: Workload, precision: str, gpu: str, capacity, rate: float) -> dict:
    """AMD's published figure for this model, precision and sequence on the detected or closest GPU."""
    ref, why = published.reference_gpu(gpu, capacity / 2**30 if capacity else None)
    row = published.lookup(ref, spec.name, precision, workload.seq)
    if row is None:
        return {"gpu": ref, "why": why, "row": None}
    ours = rate if row.unit == "FPS/GPU" else rate * workload.flops_per_item["amd"] / 1e12
    return {"gpu": ref, "why": why, "row": vars(row), "this_run": ours, "ratio": ours / row.value}


def summary(r: dict) -> str:
    unit = "images" if r["model_type"] == "flux" else "sequences"
    per = r.get("per", "GPU")
    lines = [
        f"summary: {r['model']}, {r['precision'].upper()} ({r['compute']} compute), {r['world_size']} x "
        f"{r['device']}, batch {r['batch_size']} per {per}, the mean of the last {r['measured_steps']} "
        "optimizer steps:",
        f"  {r['iteration_s']:.3f} s/iteration, {r['step_s']:.3f} s/step "
        f"(fastest {r['step_spread_s'][0]:.3f}, slowest {r['step_spread_s'][1]:.3f})",
        f"  {r[f'{unit}_per_s_per_gpu']:,.3f} {unit}/s/{per}, "
        f"{r['tokens_per_s_per_gpu']:,.0f} tokens/s/{per}",
    ]
    for key, value in r["tflops_per_gpu"].items():
        lines.append(f"  {fmt(value)} TFLOP/s/{per} ({r['accountings'][key]})")
    if r["peak_gib"] is not None:
        lines.append(f"  peak memory {r['peak_gib']:.1f} GiB of {r['capacity_gib']:.1f} GiB (busiest rank)")
    if r["reduced_depth"]:
        lines.append(f"  reduced depth: {r['reduced_depth']}; not the full model AMD measured")
    p = r["published"]
    if p["gpu"] is None:
        lines.append(f"  no comparison with AMD's figures: {p['why']}")
    elif p["row"] is None:
        lines.append(f"  AMD publishes no figure for {r['model']} in {r['precision'].upper()} ({p['why']})")
    else:
        row = p["row"]
        counted = "FPS/GPU" if row["unit"] == "FPS/GPU" else "TFLOP/s/GPU in AMD's accounting"
        lines.append(
            f"  AMD published {row['value']} {row['unit']} on {p['gpu']} (batch {row['batch']}); this run "
            f"{p['this_run']:.2f} {counted}: {p['ratio']:.2f}x. Compared with {p['why']}"
        )
    return "\n".join(lines)


def versions() -> dict:
    try:
        return backends.versions()
    except Exception:  # noqa: BLE001 - e.g. mlperf-logging absent: not needed here
        return {"torch": torch.__version__}


# how long a rank other than 0 waits before it exits with the error rank 0 says (`main`)
RANK0_GRACE_S = 10.0


def main(argv: list[str]) -> int:
    """Exit status 0 done, 1 the model does not fit, 2 a flag or config error. Every rank finds the same
    config error: rank 0 says it (once, not once per rank), before anything is built. The other ranks wait
    up to `RANK0_GRACE_S` before they exit: torchrun stops every worker once one has exited, and a rank that
    exits first would stop rank 0 before it has said anything; rank 0's own exit ends the wait."""
    world, local_ranks = launch_sizes()
    rank0 = os.environ.get("RANK", "0") == "0"

    def say_once(*args, **kwargs) -> None:
        if rank0:
            print(*args, **kwargs)
        else:
            time.sleep(RANK0_GRACE_S)

    try:
        args = parse_args(argv)
        spec = model_for(args)
        check_this_node(spec, world, local_ranks)
        if args.json is not None and rank0:  # rank 0 writes it
            check_writable(args.json, "--json", probe=True)
    except ConfigError as err:
        say_once(f"train_fsdp.py: error: {err}", file=sys.stderr)
        return 2
    except CannotFit as err:
        say_once(f"train_fsdp.py: {err}", file=sys.stderr)
        return 1
    info = dist.init_distributed()
    try:
        measure(spec, args, info)
    except ConfigError as err:
        say_once(f"train_fsdp.py: error: {err}", file=sys.stderr)
        return 2
    except DoesNotFit as err:
        print(f"train_fsdp.py: {err}", file=sys.stderr)
        return 1
    dist.shutdown()
    return 0


if __name__ == "__main__":
    from training.common.outcome import exit_process

    exit_process(main(sys.argv[1:]))
