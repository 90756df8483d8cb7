"""What every bench in `perf/` times and records the same way: steps timed with CUDA events (wall clock on the
CPU), the peak memory, the machine's bf16 matmul rate, the top GPU kernels of a step, the versions of what
ran, and the kernel benches' rows (`timed`) and tables (`table`).
"""

from __future__ import annotations

import statistics
import time

import torch


def time_steps(step, warmup: int, steps: int, device: torch.device, host: list | None = None) -> list[float]:
    """Milliseconds per step: CUDA events on a GPU, wall clock on the CPU. On a GPU `host` (if given) gets the
    milliseconds the CPU took to issue each step: near the step's own time, the step waits on the CPU."""
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record()
            step()
            end.record()
            if host is not None:
                host.append((time.perf_counter() - t0) * 1e3)
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def take_peak(device: torch.device) -> float:
    """The GPU memory allocated at its highest since the last reset, GiB (0 on the CPU), and a reset: a
    bench's first step (compiling; native FP8 calibrating first, `training.fp8.calibrate`) is read apart from
    the steps after it, whose peak is the run's steady one."""
    if device.type != "cuda":
        return 0.0
    peak = torch.cuda.max_memory_allocated(device) / 2**30
    torch.cuda.reset_peak_memory_stats(device)
    return peak


def step_record(first_step_s: float, first_peak: float, peak: float, losses) -> dict:
    """What a bench records of a variant's steps beside its speed: the first step's time and peak apart (it
    compiles; native FP8 calibrates first), the later steps' peak, and every step's loss, from the first."""
    losses = [float(x) for x in losses]
    return {
        "peak_gib": float(peak),
        "first_step_peak_gib": float(first_peak),
        "first_step_s": first_step_s,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "losses": losses,
    }


def matmul_peak(device: torch.device) -> float | None:
    """This GPU's bf16 matmul rate on an 8192^3 product, TFLOP/s (None on the CPU)."""
    if device.type != "cuda":
        return None
    a, b = (torch.randn(8192, 8192, device=device, dtype=torch.bfloat16) for _ in range(2))
    ms = statistics.median(time_steps(lambda: a @ b, 5, 20, device))
    return 2 * 8192**3 / ms / 1e9


def print_profile(step_fn, steps: int = 3, top: int = 25, show: bool = True, title: str = "") -> None:
    """GPU kernel time per step, largest first (torch.profiler; without a GPU, the CPU operators' own time),
    under `title`. Under torchrun every rank must call it, since the steps it runs hold collectives (a rank
    that sat them out would leave the others waiting forever); `show` picks the rank that prints."""
    gpu = torch.cuda.is_available()
    activity = torch.profiler.ProfilerActivity.CUDA if gpu else torch.profiler.ProfilerActivity.CPU
    with torch.profiler.profile(activities=[activity]) as prof:
        for _ in range(steps):
            step_fn()
        if gpu:
            torch.cuda.synchronize()
    if not show:
        return
    if title:
        print(title)
    time_of = (lambda e: e.device_time_total) if gpu else (lambda e: e.self_cpu_time_total)
    events = sorted((e for e in prof.key_averages() if time_of(e) > 0), key=time_of, reverse=True)
    total = sum(time_of(e) for e in events) / steps / 1e3
    print(f"profile: {total:.1f} ms of {'GPU kernels' if gpu else 'CPU operators'} per step")
    for e in events[:top]:
        print(f"  {time_of(e) / steps / 1e3:7.2f} ms  x{e.count // steps:<5} {e.key[:110]}")


def versions() -> dict:
    """The versions `training.common.backends` records for a run (torch's alone if that fails)."""
    from training.common import backends

    try:
        return backends.versions()
    except Exception as err:  # noqa: BLE001 - e.g. mlperf-logging not installed: the benchmark still runs
        return {"torch": torch.__version__, "error": f"{type(err).__name__}: {err}"}


def timed(results: list, name: str, step, useful_flop: float) -> None:
    """Append (name, median ms on the current GPU, TFLOP/s of `useful_flop` a step) to `results`; a kernel
    that refuses these inputs is a row too, its error in place of the rate."""
    try:
        ms = statistics.median(time_steps(step, 3, 20, torch.device("cuda", torch.cuda.current_device())))
        results.append((name, ms, f"{useful_flop / ms / 1e9:.0f}"))
    except Exception as err:  # noqa: BLE001 - a backend that refuses these inputs is a result too
        results.append((name, float("nan"), f"{type(err).__name__}: {str(err)[:100]}"))


def table(title: str, results: list, unit: str = "useful TFLOP/s") -> None:
    """Print `results` (`timed`'s rows) as a markdown table under `title`."""
    print(f"\n{title}\n| variant | ms | {unit} |\n|---|---|---|")
    for name, ms, rate in results:
        print(f"| {name} | {ms:.2f} | {rate} |")
