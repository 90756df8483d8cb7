"""Where FLUX.1-dev's training step goes, on this machine's GPUs, as the throughput suite builds and runs it
(`training.throughput.flux`: diffusers' transformer, FSDP2 over the ranks, compiled blocks, AdamW).

    torchrun --nproc_per_node=4 -m perf.bench_flux [--layers N] [--batch 3] [--steps 4] [--profile 30]

Prints, on rank 0: CUDA-event medians per step, the CPU's time to issue each step (near the step's own time,
the GPU waits on the CPU), images/s and TFLOP/s per GPU (`flops.flux`), the peak memory, and with
`--profile N` the top N GPU kernels per step (communication kernels included: they overlap compute, so the
kernels' sum can exceed the step), with `--cpu-profile N` the top N operators by CPU time over 2 steps.
`--layers N`: N double and 2N single blocks (default: the full 19 / 38).

Loss parity (`perf/lib/parity.py`): unless `--no-reference`, the same model eager (no compile) runs the same
number of steps first, from the same weights (one seed) on the same inputs (one generator), and the timed
run's per-step losses (every step, warm-up included) are checked against its. FLUX's flow-matching loss has no
"uniform" value: the degenerate check is off, the tolerance is bf16's.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
from pathlib import Path

import torch

from perf.lib import parity, processes
from perf.lib.timing import print_profile, time_steps
from training.llama import parallel
from training.throughput import flux
from training.throughput.config import RunArgs, model_for

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "throughput" / "flux.1-dev.json"


def train(args, device, world: int, compiled: bool, steps: int | None = None):
    """(per-step losses, (step, workload, times, host)): a fresh model from seed 0, `args.warmup` untimed and
    `args.steps` timed steps (or `steps` untimed ones)."""
    torch.manual_seed(0)
    run = RunArgs(
        CONFIG, "flux", batch_size=args.batch, grad_accum=1, num_layers=args.layers, enable_compile=compiled
    )
    workload = flux.build(model_for(run), run, device, parallel.build_mesh("cuda", world, 1), world)
    train_step, losses = workload.make_step(args.batch, 1), []

    def step():
        losses.append(train_step())

    if steps is not None:
        for _ in range(steps):
            step()
        return parity.as_floats(losses), None
    host: list[float] = []
    times = time_steps(step, args.warmup, args.steps, device, host)
    return parity.as_floats(losses), (step, workload, times, host)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--batch", type=int, default=3, help="images per GPU per step")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile", type=int, default=0, help="print this many top GPU kernels")
    ap.add_argument("--cpu-profile", type=int, default=0, help="print this many top CPU ops (self time)")
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--no-reference", dest="reference", action="store_false", help="no loss parity reference")
    args = ap.parse_args()
    procs = processes.start(gpu=True)
    device, world, say = procs.device, procs.world, procs.say
    reference = None
    if args.reference:  # eager, same weights and inputs: the losses the compiled steps must reproduce
        reference, _ = train(args, device, world, compiled=False, steps=args.warmup + args.steps)
        say(f"reference (eager): losses {', '.join(f'{x:.4f}' for x in reference)}", flush=True)
        gc.collect()  # the reference's model and optimizer went with its frame: give their memory back
        torch.cuda.empty_cache()
    losses, (step, workload, times, host) = train(args, device, world, compiled=args.compile)
    check = (
        parity.verdict(losses, reference, uniform=float("nan"), reference_name="eager") if reference else None
    )
    ms = statistics.median(times)
    images = args.batch / ms * 1e3
    gpu = torch.cuda.get_device_name(device)
    say(f"{gpu} x {world}, {workload.blocks} blocks, batch {args.batch} per GPU")
    say(
        f"  {ms:.1f} ms/step (CUDA events; steps {', '.join(f'{t:.0f}' for t in times)}), CPU issue "
        f"{statistics.median(host):.1f} ms/step"
    )
    tflops = images * workload.flops_per_item["ours"] / 1e12
    say(
        f"  {images:.2f} images/s/GPU, {tflops:.1f} TFLOP/s/GPU, peak "
        f"{torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB"
    )
    say(f"  losses {', '.join(f'{x:.4f}' for x in losses)}; loss parity: {parity.column(check)}")
    if args.profile and procs.main:
        print_profile(step, steps=2, top=args.profile)
    elif args.profile:
        for _ in range(2):  # the other ranks run the same steps (collectives)
            step()
    if args.cpu_profile:
        activity = [torch.profiler.ProfilerActivity.CPU] if procs.main else []
        with torch.profiler.profile(activities=activity) as prof:
            for _ in range(2):
                step()
            torch.cuda.synchronize()
        say(
            prof.key_averages().table(
                sort_by="self_cpu_time_total", row_limit=args.cpu_profile, max_name_column_width=70
            )
        )
    procs.end()
    return 0


if __name__ == "__main__":
    sys.exit(main())
