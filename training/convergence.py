"""A local convergence check, before a day of real runs: does the mode a config asks for (FP8, compiled
blocks, fused kernels, ...) reach the target in as many samples as a plain reference mode?

    python -m training.convergence BENCHMARK --datadir DIR [--config CONFIG.sh] [--set NAME=VALUE ...]
        [--reduce NAME=VALUE ...] [--seeds 5] [--out DIR]

It runs the benchmark's reduced-size configuration (its small default, `configs/<benchmark>/config_CPU_*.sh`,
on the data its `prepare_data.sh --sample` writes) with `--seeds` seeds in two modes:
- reference: bf16 on a GPU (fp32 on the CPU), eager, PyTorch's kernels (SDPA, PyTorch dropout, torch's
  AdamW), FP8 and FP4 off;
- the mode: the mode variables of `--config` (only those: PRECISION, FP8*, FP4*, HEALING_*, COMPILE,
  ATTENTION, ACTIVATION_CHECKPOINTING, ...; its sizes and batch are not this check's business), then each
  `--set NAME=VALUE`; what neither sets takes the benchmark's default, as in a real run.
`--reduce NAME=VALUE` changes the reduced configuration of both (a shorter sequence, an easier target: the
tests' tiny form).
Each run is the benchmark's own trainer (`python -m training.<benchmark>.train`), its MLLOG log kept in
`--out`; samples to target come from the log as the scorer reads them (`training.scoring.runs`). The two
samples-to-target distributions are compared the way MLCommons' RCP checker compares a submission with its
reference (the reference runs play the RCP's part): olympic means (the fastest and slowest run dropped), and
mlperf-logging's own search for the smallest mean a submission may have at alpha 0.05. A mode faster than
that would fail the RCP check; a mode slower than the reference by a one-sided Welch t-test at alpha 0.05
learns less per sample and loses at least part of its speed-up (the verdict says by how much). A mode run
that does not converge counts against it. Writes `convergence.md`, `convergence.json` and `convergence.png`
(every run's evaluations against samples) to `--out`.

Sized for one GPU in minutes per benchmark (the small defaults are toy models: this checks that a mode's
numerics learn like the reference's, not the benchmark's real curve); `--seeds 3` on a CPU is the tiny form
the tests run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from training import benchmarks
from training.common import outcome
from training.common.config import env_names
from training.common.console import METRICS
from training.common.files import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
# the variables that choose how a run computes, not what it computes (sizes, batch, schedule, data)
MODE_VARIABLES = tuple(
    "PRECISION FP8 FP8_BACKEND FP8_RECIPE FP8_CASTS FP8_WEIGHTS FP8_PARAM_GATHER COMPILE COMPILE_MODE "
    "ATTENTION ACTIVATION_CHECKPOINTING ACL AC_KEEP_ATTENTION LORA_KERNEL ADAMW_IMPL RESIDUAL_DTYPE "
    "FP8_ATTENTION COMPILE_DIT FP4 FP4_RECIPE HEALING_ITER HEALING_PRECISION WARMUP_RECIPE "
    "NVTE_MXFP4_USE_HADAMARD NVTE_NVFP4_DISABLE_RHT NVTE_NVFP4_DISABLE_2D_QUANTIZATION "
    "NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING".split()
)
# how a run may end and still count: it learned to the target, or short of it, or diverged
LEARNING_OUTCOMES = ("converged", "not_converged", "diverged")
REFERENCE = {
    "COMPILE": "0",
    "ATTENTION": "sdpa",
    "LORA_KERNEL": "pytorch",
    "ADAMW_IMPL": "torch",
    "FP4": "0",
    "FP8_WEIGHTS": "0",
    "ACTIVATION_CHECKPOINTING": "0",
    "RESIDUAL_DTYPE": "fp32",
    "COMPILE_DIT": "0",
}
ALPHA = 0.05


class CheckError(Exception):
    """A problem with the check's own inputs (a missing file, an unknown variable), named."""


@dataclass
class Outcome:
    mode: str
    seed: int
    log: Path
    converged: bool
    samples: float | None  # samples to target (the last evaluation's), None when not converged
    seconds: float
    evals: list[tuple[float, float]] = field(default_factory=list)  # (samples, eval_accuracy)


def config_class(benchmark: benchmarks.Benchmark):
    """The benchmark's config class: the RunSettings subclass `<package>.config` defines (not one it
    imports)."""
    from training.common.config import RunSettings

    module = importlib.import_module(f"{benchmark.package}.config")
    found = [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, RunSettings) and v.__module__ == module.__name__
    ]
    return found[0]


def sourced(config: Path) -> dict[str, str]:
    """The variables a config file exports: the environment after sourcing it in a bash subshell, less the
    one before (nothing of the file is parsed here)."""
    if not config.is_file():
        raise CheckError(f"{config}: no such config file")
    mark = "\0--sourced--\0"  # between the two listings (printf writes the NULs)
    script = 'env -0; printf "\\0--sourced--\\0"; source "$1" > /dev/null; env -0'
    done = subprocess.run(
        ["bash", "-c", script, "bash", str(config)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    if done.returncode != 0:
        raise CheckError(f"{config}: sourcing it failed: {done.stderr.strip()[-300:]}")

    def read(listing: str) -> dict[str, str]:
        pairs = (item.partition("=") for item in listing.split("\0") if "=" in item)
        return {k: v for k, _, v in pairs}

    old, new = (read(part) for part in done.stdout.split(mark))
    return {k: v for k, v in new.items() if old.get(k) != v and k not in ("_", "SHLVL", "PWD", "OLDPWD")}


def small_default(benchmark: benchmarks.Benchmark) -> Path:
    found = sorted((ROOT / "configs" / benchmark.name).glob("config_CPU_*.sh"))
    if not found:
        raise CheckError(f"configs/{benchmark.name}/config_CPU_*.sh: the benchmark has no small default")
    return found[0]


def modes(benchmark: benchmarks.Benchmark, config: Path | None, sets: list[str], gpu: bool):
    """(reference, mode): each the mode variables it sets, only those the benchmark knows. The mode is what
    the config and `--set` ask for; what they leave unset takes the benchmark's default (as in a real run)."""
    known = set(env_names(config_class(benchmark)).values()) | {"FP8"}
    reference = {k: v for k, v in REFERENCE.items() if k in known}
    reference["PRECISION"] = "bf16" if gpu else "fp32"
    mode = {}
    if config is not None:
        asked = sourced(config)
        if asked.get("BENCHMARK", benchmark.name) != benchmark.name:
            raise CheckError(f"{config} is a {asked['BENCHMARK']} config, not {benchmark.name}'s")
        mode.update({k: v for k, v in asked.items() if k in MODE_VARIABLES})
    for item in sets:
        name, eq, value = item.partition("=")
        if not eq or name not in known:
            raise CheckError(f"--set {item}: expected NAME=VALUE with a variable of {benchmark.name}")
        mode[name] = value
    return reference, mode


def run_one(
    benchmark,
    base: dict[str, str],
    names: list[str],
    variables: dict[str, str],
    mode: str,
    seed: int,
    out: Path,
    datadir: Path,
) -> Outcome:
    """One run of the trainer; its log is `out/<mode>_seed<seed>.log` (never overwritten: a rerun of the
    check writes into a new folder). `names`: the reduced configuration's variables, checked by the
    trainer as a config file's are (CONFIG_VARS)."""
    tag = f"{mode}_seed{seed}"
    log = out / f"{tag}.log"
    env = {
        **base,
        **variables,
        "SEED": str(seed),
        "DATADIR": str(datadir),
        "LOGDIR": str(out),
        "RUN_TAG": tag,
        "CONFIG_VARS": " ".join(sorted({*names, *variables})),
    }
    if "INDEX_CACHE_DIR" in env:  # one a run: runs at once would write the same index files (`--jobs`)
        env["INDEX_CACHE_DIR"] = str(Path(env["INDEX_CACHE_DIR"]) / tag)
    t0 = time.perf_counter()
    with open(log, "x") as f:
        done = subprocess.run(
            [sys.executable, "-m", benchmark.entry], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        )
    seconds = time.perf_counter() - t0
    stopped = outcome.read(log)
    if stopped is not None and stopped.status not in LEARNING_OUTCOMES:
        raise CheckError(f"{log}: the run stopped with {stopped.status}: {stopped.detail}"[:600])
    from training.scoring.runs import read_run

    run = read_run(log)
    converged = done.returncode == 0 and run.converged
    evals = [(float(meta.get(benchmark.samples_key, math.nan)), value) for meta, value in run.evals]
    return Outcome(
        mode, seed, log, converged, run.samples(benchmark.samples_key) if converged else None, seconds, evals
    )


def counted(n: int) -> int:
    return n - 2 if n >= 5 else n


def olympic(values: list[float]) -> float:
    """MLCommons' olympic mean: the fastest and the slowest dropped (with at least 3)."""
    values = sorted(values)
    return statistics.mean(values[1:-1] if len(values) >= 3 else values)


def compare(reference: list[Outcome], mode: list[Outcome]) -> dict:
    """The verdict: the RCP checker's smallest acceptable mean from the reference runs, and a one-sided test
    of the mode needing more samples."""
    import scipy.stats
    from mlperf_logging.rcp_checker.rcp_checker import RCP_Checker

    ref = [o.samples for o in reference if o.converged]
    got = [o.samples for o in mode if o.converged]
    out = {
        "reference_samples": ref,
        "mode_samples": got,
        "reference_runs": len(reference),
        "mode_runs": len(mode),
    }
    if len(ref) < 3 or len(got) < 3:
        counts = f"reference {len(ref)} of {len(reference)}, mode {len(got)} of {len(mode)}"
        out.update(ok=False, verdict=f"too few converged runs to compare ({counts}; 3 each needed)")
        return out
    ref_mean, got_mean = olympic(ref), olympic(got)
    ref_std, got_std = statistics.pstdev(ref), statistics.pstdev(got)
    # mlperf-logging's own search: the smallest mean of `len(got)` runs that is not faster than the reference
    # at alpha 0.05 (its RCP_Checker is built for its own tables: only its statistics are borrowed here)
    # (MLCommons counts n - 2 runs of an olympic mean; with fewer than 5 runs all of them count here)
    checker = RCP_Checker.__new__(RCP_Checker)
    checker.alpha, checker.tolerance, checker.submission_runs = ALPHA, 0.0001, counted(len(got)) + 2
    min_mean = checker._find_min_acceptable_mean(ref_mean, ref_std, counted(len(ref)))
    with warnings.catch_warnings():  # runs that converge at the same evaluation: identical samples
        warnings.simplefilter("ignore", RuntimeWarning)
        p_slower = float(scipy.stats.ttest_ind(got, ref, equal_var=False, alternative="greater").pvalue)
    p_slower = 1.0 if math.isnan(p_slower) else p_slower  # (identical runs on both sides)
    out.update(
        reference_mean=ref_mean,
        reference_std=ref_std,
        mode_mean=got_mean,
        mode_std=got_std,
        rcp_min_mean=min_mean,
        slower_p=p_slower,
        ratio=got_mean / ref_mean,
    )
    failed = len(mode) - len(got)
    if got_mean < min_mean:
        out.update(
            ok=False,
            verdict=f"converges faster than the reference allows ({got_mean:.0f} < "
            f"{min_mean:.0f} samples): an RCP check would fail",
        )
    elif p_slower < ALPHA:
        out.update(
            ok=False,
            verdict=f"needs {got_mean / ref_mean - 1:.1%} more samples than the reference "
            f"(p = {p_slower:.3f}): it learns less per sample",
        )
    elif failed:
        out.update(ok=False, verdict=f"{failed} of {len(mode)} runs of the mode did not converge")
    else:
        why = f"p = {p_slower:.2f} for 'more'; RCP minimum {min_mean:.0f}"
        out.update(
            ok=True, verdict=f"same convergence: {got_mean / ref_mean:.3f}x the reference's samples ({why})"
        )
    return out


def plot(outcomes: list[Outcome], target: float | None, path: Path, benchmark: str) -> None:
    """Every run's evaluations against samples, the axis named by what the benchmark's eval_accuracy is."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = {"reference": "tab:blue", "mode": "tab:orange"}
    for o in outcomes:
        if o.evals:
            xs, ys = zip(*o.evals)
            ax.plot(xs, ys, color=colors[o.mode], alpha=0.7, marker=".", label=o.mode)
    if target is not None:
        ax.axhline(target, color="grey", ls="--", lw=1, label="target")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys())
    ax.set_xlabel("samples")
    ax.set_ylabel(f"{METRICS.get(benchmark, 'eval_accuracy')} (eval_accuracy)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(benchmark, reference: dict, mode: dict, outcomes: list[Outcome], verdict: dict) -> str:
    def fmt(o: Outcome) -> str:
        samples = f"{o.samples:.0f}" if o.samples is not None else "did not converge"
        return f"| {o.mode} | {o.seed} | {samples} | {o.seconds:.0f} | {o.log.name} |"

    lines = [
        f"# Convergence check: {benchmark.name} (the small default's configuration)",
        "",
        f"- reference: `{' '.join(f'{k}={v}' for k, v in sorted(reference.items()))}`",
        f"- mode: `{' '.join(f'{k}={v}' for k, v in sorted(mode.items()))}`",
        f"- **verdict: {'PASS' if verdict['ok'] else 'FAIL'}**: {verdict['verdict']}",
    ]
    if "reference_mean" in verdict:
        v = verdict
        lines.append(
            f"- olympic mean samples to target: reference {v['reference_mean']:.0f} (std "
            f"{v['reference_std']:.0f}), mode {v['mode_mean']:.0f} (std {v['mode_std']:.0f}); RCP "
            f"minimum {v['rcp_min_mean']:.0f}"
        )
    lines += ["", "| mode | seed | samples to target | seconds | log |", "|---|---|---|---|---|"]
    lines += [fmt(o) for o in outcomes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.convergence",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("benchmark", help=", ".join(benchmarks.BENCHMARKS))
    parser.add_argument("--datadir", type=Path, required=True, help="the small default's data (--sample)")
    parser.add_argument("--config", type=Path, help="a config whose mode variables make the mode")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a mode variable")
    parser.add_argument(
        "--reduce",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable of the reduced configuration, for both modes",
    )
    parser.add_argument("--seeds", type=int, default=5, help="runs per mode (at least 3; default 5)")
    parser.add_argument(
        "--jobs", type=int, default=1, help="runs at once (toy models leave a GPU mostly idle; default 1)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="a new folder for logs and the report (default: results/convergence/<benchmark>_<time>)",
    )
    args = parser.parse_args(argv)
    try:
        benchmark = benchmarks.runnable(args.benchmark, "BENCHMARK")
        if args.jobs < 1:
            raise CheckError(f"--jobs {args.jobs}: at least 1")
        if args.seeds < 3:
            raise CheckError(f"--seeds {args.seeds}: at least 3 (an olympic mean drops two)")
        if not args.datadir.is_dir():
            raise CheckError(f"--datadir {args.datadir}: no such folder (prepare_data.sh --sample writes it)")
        import torch

        gpu = torch.cuda.is_available()
        reference, mode = modes(benchmark, args.config, args.set, gpu)
        # the small default's sizes, batch, schedule and data; its mode variables are each mode's business
        base_vars = {k: v for k, v in sourced(small_default(benchmark)).items() if k not in MODE_VARIABLES}
        known = set(env_names(config_class(benchmark)).values())
        for item in args.reduce:
            name, eq, value = item.partition("=")
            if not eq or name not in known:
                raise CheckError(f"--reduce {item}: expected NAME=VALUE with a variable of {benchmark.name}")
            base_vars[name] = value
        out = (
            args.out
            or ROOT / "results" / "convergence" / f"{benchmark.name}_{time.strftime('%Y%m%d_%H%M%S')}"
        )
        if out.exists() and any(out.iterdir()):
            raise CheckError(f"--out {out}: not empty (nothing there is overwritten: name a new folder)")
        out.mkdir(parents=True, exist_ok=True)
    except (CheckError, ValueError) as err:
        print(f"convergence: error: {err}", file=sys.stderr)
        return 2
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    base.update(base_vars)
    base.setdefault("INDEX_CACHE_DIR", str(out / "index_cache"))  # (Llama's data index, not in DATADIR)
    names = [k for k in base_vars if k.isupper() and k != "INDEX_CACHE_DIR"]
    target = float(base_vars.get("TARGET", base_vars.get("TARGET_MLM_ACCURACY", "nan")))
    print(
        f"convergence: {benchmark.name}, {args.seeds} seeds x 2 modes on {'a GPU' if gpu else 'the CPU'}; "
        f"logs in {out}",
        flush=True,
    )
    runs = [
        (name, variables, seed)
        for seed in range(1, args.seeds + 1)
        for name, variables in (("reference", reference), ("mode", mode))
    ]
    outcomes = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        pending = [
            pool.submit(run_one, benchmark, base, names, v, name, seed, out, args.datadir)
            for name, v, seed in runs
        ]
        try:
            for i, done in enumerate(concurrent.futures.as_completed(pending), 1):
                o = done.result()
                outcomes.append(o)
                result = f"converged at {o.samples:.0f} samples" if o.converged else "did not converge"
                print(
                    f"  [{i}/{len(runs)}] {o.mode} seed {o.seed}: {result} ({o.seconds:.0f} s; {o.log.name})",
                    flush=True,
                )
        except CheckError as err:
            for p in pending:
                p.cancel()
            print(f"convergence: {err}", file=sys.stderr)
            return 2
    outcomes.sort(key=lambda o: (o.seed, o.mode != "reference"))
    verdict = compare(
        [o for o in outcomes if o.mode == "reference"], [o for o in outcomes if o.mode == "mode"]
    )
    summary = {
        "benchmark": benchmark.name,
        "reference": reference,
        "mode": mode,
        "verdict": verdict,
        "runs": [{**vars(o), "log": o.log.name} for o in outcomes],
    }
    write_text_atomic(out / "convergence.json", json.dumps(summary, indent=2) + "\n")
    write_text_atomic(out / "convergence.md", report(benchmark, reference, mode, outcomes, verdict))
    plot(outcomes, None if math.isnan(target) else target, out / "convergence.png", benchmark.name)
    print(f"convergence: {'PASS' if verdict['ok'] else 'FAIL'}: {verdict['verdict']}")
    print(f"convergence: report {out / 'convergence.md'}, plot {out / 'convergence.png'}")
    return 0 if verdict["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
