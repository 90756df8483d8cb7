"""What the GPU scripts in perf/ read from their runs' logs and the benches' JSON, printed as tables:

    python -m perf.logs compare [--json FILE] NAME=LOGDIR ...   # runs of one seed beside the first
    python -m perf.logs throughput LOGDIR [--gpus N] [--against SAMPLES_PER_S | --bench FILE --variant V]
    python -m perf.logs scaling OUT VARIANT COUNT ...           # bench_bert's samples/s on 1, 2, ... GPUs
    python -m perf.logs lora-projection OUT GPUS                # LoRA runs: speed, projected time to train
    python -m perf.logs gpus [--system]                         # the GPUs torch sees: how many (H100/H200)

The MLLOG lines are read by the scorer's reader (`training.scoring.runs`), the trainers' step lines by the
console's pattern (`training.common.console.STEP`). A LOGDIR is a runner's LOGDIR: its first run log is read.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from training.common.console import STEP
from training.scoring import runs
from training.scoring.rcp_tables import PACKAGE_TABLES

RCP = "llama2_70b_lora_ref_8"  # the RCP of GBS 8, the LoRA configs' batch


def first_log(logdir: Path) -> Path | None:
    found = runs.find_logs(logdir) if logdir.is_dir() else []
    return found[0] if found else None


def eval_points(run: runs.Run) -> dict[int, float]:
    """{samples: eval_accuracy}: the samples from the metadata's samples_count, else epoch_num (BERT's)."""
    points = {}
    for metadata, value in run.evals:
        samples = metadata.get("samples_count", metadata.get("epoch_num"))
        if samples is not None:
            points[int(samples)] = value
    return points


def step_losses(log: Path) -> dict[int, float]:
    """{samples: loss} of the trainer's `step N samples S loss L` lines."""
    losses = {}
    for line in log.read_text(encoding="latin-1").splitlines():
        if (m := STEP.match(line)) is not None:
            losses[int(m.group(2))] = float(m.group(3))
    return losses


def tracked(log: Path) -> list[dict]:
    """The values of a log's tracked_stats records, in order."""
    found = [r["value"] for r in runs.records(log) if r["key"] == "tracked_stats"]
    return [value for value in found if isinstance(value, dict)]


def compare(args) -> int:
    """Each named run's eval_accuracy and training loss beside the first's, and their largest differences."""
    evals, losses, missing = {}, {}, []
    for word in args.runs:
        name, eq, folder = word.partition("=")
        if not eq or not name:
            raise SystemExit(f"perf.logs compare: {word!r} is not NAME=LOGDIR")
        log = first_log(Path(folder))
        if log is None:
            print(f"{name}: no run log in {folder}")
            missing.append(name)
            continue
        run = runs.read_run(log)
        evals[name], losses[name] = eval_points(run), step_losses(log)
        backends = {r["key"]: r["value"] for r in runs.records(log) if r["key"].startswith("backend_")}
        print(f"{name}: {log}, {run.status}; backends {backends}")
    names = list(evals)
    if names:
        ref = names[0]
        for what, points in (("eval_accuracy", evals), ("training loss", losses)):
            keys = sorted(set.intersection(*(set(points[n]) for n in names)))
            if not keys:
                print(f"{what}: no samples count common to {', '.join(names)}")
                continue
            print(f"\n| {what} at samples | {' | '.join(names)} |\n|---|{'---|' * len(names)}")
            for k in keys:
                print(f"| {k} | {' | '.join(f'{points[n][k]:.4f}' for n in names)} |")
            for n in names[1:]:
                worst = max(abs(points[n][k] - points[ref][k]) for k in keys)
                rel = max(abs(points[n][k] / points[ref][k] - 1) for k in keys if points[ref][k])
                print(
                    f"{what}: {n} vs {ref}: largest difference {worst:.4f}, relative {rel:.2e} over "
                    f"{len(keys)} points"
                )
    if args.json:
        args.json.write_text(json.dumps({"accuracy": evals, "train_loss": losses}, indent=2) + "\n")
    return 1 if missing else 0


def throughput(args) -> int:
    """Each run's tracked_stats throughput per eval window; in tokens/s per GPU with --gpus; against a bench's
    samples/s with --against or --bench."""
    logs = runs.find_logs(args.logdir) if args.logdir.is_dir() else []
    if not logs:
        print(f"perf.logs throughput: no run log in {args.logdir}", file=sys.stderr)
        return 1
    rate = args.against
    if args.bench is not None:
        rate = json.loads(args.bench.read_text())["runs"][args.variant]["samples_per_s"]
    for log in logs:
        stats = [s["throughput"] for s in tracked(log) if "throughput" in s]
        print(f"{log.name}: tracked_stats throughput by eval window {[round(s, 2) for s in stats]} samples/s")
        seq = runs.read_run(log).max_sequence_length
        if args.gpus and seq:
            print(f"{log.name}: {[round(s * seq / args.gpus) for s in stats]} tokens/s per GPU")
        if rate:
            ratios = [round(s / rate, 3) for s in stats]
            print(f"{log.name}: against the bench's {rate:.1f} samples/s: {ratios}")
    return 0


def scaling(args) -> int:
    """bench_bert.py's samples/s of one variant on each GPU count, and the efficiency against one GPU."""
    if args.counts[0] != 1:
        raise SystemExit("perf.logs scaling: the first count must be 1 (the baseline)")
    rate = {}
    for n in args.counts:
        path = args.out / ("bench_bert.json" if n == 1 else f"bench_bert_{n}gpu.json")
        rate[n] = json.loads(path.read_text())["runs"][args.variant]["samples_per_s"]
    print(f"\n{args.variant}\n| GPUs | samples/s | per GPU | scaling efficiency |\n|---|---|---|---|")
    for n in args.counts:
        print(f"| {n} | {rate[n]:.0f} | {rate[n] / n:.0f} | {rate[n] / (n * rate[1]):.1%} |")
    return 0


def lora_projection(args) -> int:
    """Llama 2 70B LoRA runs (OUT/lora_*/) beside bench_lora.py's peer (OUT/bench_lora.json), and a projected
    time to train on 8 GPUs: the RCP's mean samples to converge over 8 x the per-GPU throughput, plus the
    evaluations (173 rows each at the measured seconds per row, spread over 8 GPUs)."""
    out, gpus = args.out, args.gpus
    rcps = PACKAGE_TABLES / "training_5.1.0/rcps_llama2_70b_lora.json"
    mean_samples = statistics.mean(json.loads(rcps.read_text())[RCP]["samples to converge"])
    peer = None
    bench = out / "bench_lora.json"
    if bench.exists():
        peer = next(
            (
                (name, r)
                for name, r in json.loads(bench.read_text())["runs"].items()
                if name.startswith("peft") and "tokens_per_s" in r
            ),
            None,
        )
    print(f"\nLlama 2 70B LoRA, 80 blocks, {gpus} GPUs, seq 8192, GBS 8; RCP mean {mean_samples:.0f} samples")
    print("| run | s/step | tokens/s per GPU | model TFLOP/s per GPU | vs peer | projected 8-GPU TTT (min) |")
    print("|---|---|---|---|---|---|")
    if peer:
        r = peer[1]
        print(
            f"| peer {peer[0]} (bench) | {r['ms'] / 1e3:.2f} | {r['tokens_per_s']:.0f} | "
            f"{r['model_tflops']:.0f} | 1.00x | |"
        )
    for folder in sorted(p for p in out.glob("lora_*") if p.is_dir()):
        for log in runs.find_logs(folder):
            records = runs.records(log)
            stats = [r["value"] for r in records if r["key"] == "tracked_stats"]
            if not stats:
                print(f"| {folder.name} | no tracked_stats ({log}) | | | | |")
                continue
            last = stats[-1]  # the steady window (the first one follows run_start)
            tokens = last["tokens_per_s_per_gpu"]
            starts = [r["time_ms"] for r in records if r["key"] == "eval_start"]
            stops = [r["time_ms"] for r in records if r["key"] == "eval_stop"]
            rows = next((r["value"] for r in records if r["key"] == "eval_samples"), 0)
            eval_s_per_row = (stops[-1] - starts[-1]) / 1e3 / max(rows, 1) if starts and stops else 0.0
            evals = int((mean_samples - 4 * 384) // 384) + 1  # at 1536, 1920, ... samples up to the mean
            ttt = mean_samples * 8192 / (tokens * 8) + evals * 173 * eval_s_per_row * gpus / 8
            ratio = f"{tokens / peer[1]['tokens_per_s']:.2f}x" if peer else "-"
            print(
                f"| {folder.name} | {8 * 8192 / gpus / tokens:.2f} | {tokens:.0f} | "
                f"{last['model_tflops_per_gpu']:.0f} | {ratio} | {ttt / 60:.1f} |"
            )
    print(
        "projection: mean RCP samples x 8192 tokens / (tokens/s per GPU x 8) + evaluations (173 rows each "
        "at the measured seconds per row, spread over 8 GPUs); best 8 x H200 MLPerf result 23.06 min "
        "(Lenovo, v4.1)"
    )
    return 0


def gpus(args) -> int:
    import torch

    if args.system:
        print("H100" if "H100" in torch.cuda.get_device_name() else "H200")
    else:
        print(torch.cuda.device_count())
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m perf.logs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare", help=compare.__doc__)
    p.add_argument("runs", nargs="+", metavar="NAME=LOGDIR", help="the first is the reference")
    p.add_argument("--json", type=Path, help="also write the points to this file")
    p.set_defaults(func=compare)
    p = sub.add_parser("throughput", help=throughput.__doc__)
    p.add_argument("logdir", type=Path)
    p.add_argument("--gpus", type=int, help="the run's GPUs: also tokens/s per GPU")
    p.add_argument("--against", type=float, help="a bench's samples/s to set the runner's against")
    p.add_argument("--bench", type=Path, help="bench_bert.py's JSON: its --variant's samples/s")
    p.add_argument("--variant", help="with --bench")
    p.set_defaults(func=throughput)
    p = sub.add_parser("scaling", help=scaling.__doc__)
    p.add_argument("out", type=Path)
    p.add_argument("variant")
    p.add_argument("counts", nargs="+", type=int)
    p.set_defaults(func=scaling)
    p = sub.add_parser("lora-projection", help=lora_projection.__doc__)
    p.add_argument("out", type=Path)
    p.add_argument("gpus", type=int)
    p.set_defaults(func=lora_projection)
    p = sub.add_parser("gpus", help="the number of GPUs torch sees")
    p.add_argument("--system", action="store_true", help="their kind instead: H100, else H200")
    p.set_defaults(func=gpus)
    args = ap.parse_args(argv)
    if args.command == "throughput" and (args.bench is None) != (args.variant is None):
        ap.error("throughput: --bench and --variant go together")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
