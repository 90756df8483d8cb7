"""The seed's whole table in one go: `python train_fsdp.py --suite`.

Each row of AMD's table for the detected GPU (or the closest, `published.reference_gpu`) runs as its own
`torchrun ... train_fsdp.py CONFIG MODEL_TYPE --batch_size B [--enable_fp8 True] --json ROW.json`, its output
shown and kept in ROW.log; then `throughput.md` and `throughput.json` in the output folder hold the table: our
figures in both accountings beside AMD's. A row that fails (a model that does not fit, say) is listed with its
error and the suite goes on; the exit status is 1 if any row failed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from training.common.config import ConfigError
from training.throughput import published
from training.throughput.flops import fmt

ROOT = Path(__file__).resolve().parents[2]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="train_fsdp.py --suite", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--nproc_per_node", type=int, default=None, help="GPUs (default: all visible, CPU: 1)")
    p.add_argument("--output_dir", type=Path, default=Path("throughput_results"))
    p.add_argument("--configs", type=Path, default=ROOT / "configs" / "throughput", help="the JSON configs")
    p.add_argument("--batch_size", default="table",
                   help="table (AMD's batch for the reference GPU), auto, or one number for all")  # fmt: skip
    p.add_argument("--only", default="", help="comma-separated parts of row names (e.g. '8B,Mistral')")
    p.add_argument("--gpu", choices=sorted(published.TABLES), default=None,
                   help="the table to reproduce (default: the detected GPU's, else the closest)")  # fmt: skip
    p.add_argument("extra", nargs=argparse.REMAINDER,
                   help="after --: flags for every row (e.g. -- --num_iteration 64)")  # fmt: skip
    return p


def row_id(row: published.Row) -> str:
    seq = f"-{row.seq}" if row.seq else ""
    return f"{row.model.lower().replace(' ', '-')}{seq}-{row.precision}"


def command(row: published.Row, args, nproc: int, out: Path) -> list[str]:
    batch = str(row.batch) if args.batch_size == "table" else args.batch_size
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
        str(ROOT / "train_fsdp.py"), str(args.configs / row.config), row.model_type,
        "--batch_size", batch, "--enable_fp8", str(row.precision == "fp8"),
        "--json", str(out / f"{row_id(row)}.json"),
    ]  # fmt: skip
    return cmd + [a for a in args.extra if a != "--"]


def run_row(cmd: list[str], log: Path) -> int:
    """Run one row, its output shown and written to `log` line by line (a row stopped mid-run keeps it)."""
    with (
        log.open("w", buffering=1) as sink,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT) as proc,
    ):
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            sink.write(line)
        return proc.wait()


def table(rows: list[dict], gpu: str, why: str) -> str:
    """The markdown table of the suite's results (`rows`: one dict per row, `result` None if it failed)."""
    lines = [
        f"Compared with AMD's published {gpu} figures ({why}).",
        "",
        "| model | precision | seq | batch/GPU | tokens/s/GPU | TFLOP/s/GPU (ours) "
        f"| TFLOP/s/GPU (AMD's count) | AMD {gpu} | vs AMD | peak GiB | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        row, res = r["row"], r["result"]
        seq = res["seq_len"] if res is not None else row["seq"]
        head = f"| {row['model']} | {row['precision'].upper()} | {seq or '-'} "
        amd = f"{row['value']} {'FPS/GPU' if row['unit'] == 'FPS/GPU' else ''}".strip()
        if res is None:
            lines.append(head + f"| {row['batch']} | - | - | - | - | {amd} | - | - | {r['error']} |")
            continue
        flops = res["tflops_per_gpu"]
        p = res["published"]
        ratio = f"{p['ratio']:.2f}x" if p.get("row") else "-"
        if res["model_type"] == "flux":
            ours_cell = f"{res['images_per_s_per_gpu']:.2f} FPS/GPU"
            amd_count = "-"
        else:
            ours_cell, amd_count = fmt(flops["ours"]), fmt(flops["amd"])
        peak = f"{res['peak_gib']:.1f}" if res.get("peak_gib") is not None else "-"
        notes = "; ".join(
            n for n in (res.get("reduced_depth"), res["backends"].get("fp8", "")) if n and n != "off"
        )
        lines.append(
            head + f"| {res['batch_size']} | {res['tokens_per_s_per_gpu']:,.0f} | {ours_cell} | {amd_count} "
            f"| {amd} | {ratio} | {peak} | {notes} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    import torch  # after --help

    gpus = torch.cuda.device_count()
    name = torch.cuda.get_device_name(0) if gpus else "CPU"
    memory = torch.cuda.get_device_properties(0).total_memory / 2**30 if gpus else None
    gpu, why = published.reference_gpu(name, memory)
    if args.gpu:
        gpu, why = args.gpu, f"{args.gpu}, as asked (--gpu)"
    nproc = args.nproc_per_node or max(gpus, 1)
    wanted = [w for w in args.only.split(",") if w]
    rows = [
        r for r in published.TABLES[gpu] if not wanted or any(w in row_id(r) or w in r.model for w in wanted)
    ]
    if not rows:
        raise ConfigError(f"--only {args.only!r} matches no row of the {gpu} table")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for row in rows:
        cmd = command(row, args, nproc, args.output_dir)
        print(f"==> {row_id(row)}: {' '.join(cmd)}", flush=True)
        status = run_row(cmd, args.output_dir / f"{row_id(row)}.log")
        out = args.output_dir / f"{row_id(row)}.json"
        done = status == 0 and out.exists()
        error = None if done else _error(args.output_dir / f"{row_id(row)}.log", status)
        result = json.loads(out.read_text()) if done else None
        results.append({"row": vars(row), "command": cmd, "result": result, "error": error})
    (args.output_dir / "throughput.json").write_text(
        json.dumps({"reference_gpu": gpu, "why": why, "device": name, "rows": results}, indent=2) + "\n"
    )
    text = table(results, gpu, why)
    (args.output_dir / "throughput.md").write_text(text)
    print("\n" + text, flush=True)
    return 0 if all(r["result"] for r in results) else 1


def _error(log: Path, status: int) -> str:
    """The row's error line (train_fsdp.py's own), else its exit status."""
    lines = [ln for ln in log.read_text().splitlines() if ln.startswith("train_fsdp.py: ")]
    return lines[-1].removeprefix("train_fsdp.py: ") if lines else f"exit status {status}"
