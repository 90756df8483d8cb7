"""The seed's whole table in one go: `python train_fsdp.py --suite`.

Each row of AMD's table for the detected GPU (or the closest, `published.reference_gpu`) runs as its own
`torchrun ... train_fsdp.py CONFIG MODEL_TYPE --batch_size B [--enable_fp8 True] --json ROW.json`, its output
shown and kept in ROW.log; `throughput.md` and `throughput.json` in the output folder (by default
results/throughput/<time>, under the checkout's git-ignored results/ when run from its root) hold the table
of the rows done so far, rewritten whole after each: our figures in both accountings beside AMD's. A row that
cannot fit is said so without starting it; a row that fails is listed with its error and the suite goes on.
SIGINT or SIGTERM stops the row running (torchrun and its workers, each in a process group of its own, at
once) and leaves the table of the rows before it. Exit status: 0 every row done, 1 a row failed, 2 a flag
error (before any row), 130/143 stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from training.common.config import ConfigError
from training.common.console import TorchrunReport
from training.common.files import write_text_atomic
from training.throughput import published
from training.throughput.config import check_writable, model_for, parse_args
from training.throughput.flops import fmt
from training.throughput.memory import CannotFit, check_this_node

ROOT = Path(__file__).resolve().parents[2]
STOP_GRACE_S = 10.0  # a row's processes get SIGTERM, then SIGKILL after this long


class Stopped(Exception):
    """SIGINT or SIGTERM reached the suite."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage and error
        if message.startswith("unrecognized arguments:"):
            message = (
                f"unknown flag {message.split(':', 1)[1].strip()} (train_fsdp.py --suite --help lists them)"
            )
        raise ConfigError(message)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--nproc_per_node takes a positive integer, not {text!r}")
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="train_fsdp.py --suite",
        usage="python train_fsdp.py --suite [flags] [-- row flags]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument(
        "--nproc_per_node", type=_positive, default=None, help="GPUs (default: all visible; CPU: 1)"
    )
    p.add_argument(
        "--output_dir",
        type=Path,
        default=None,
        help="the rows' logs and the table (default: results/throughput/<time>)",
    )
    p.add_argument("--configs", type=Path, default=ROOT / "configs" / "throughput", help="the JSON configs")
    p.add_argument(
        "--batch_size",
        default="table",
        help="table (AMD's batch for the reference GPU), auto, or one number for all",
    )
    p.add_argument("--only", default="", help="comma-separated parts of row names (e.g. '8B,Mistral')")
    p.add_argument(
        "--gpu",
        choices=sorted(published.TABLES),
        default=None,
        help="the table to reproduce (default: the detected GPU's, else the closest)",
    )
    p.add_argument(
        "extra", nargs=argparse.REMAINDER, help="after --: flags for every row (e.g. -- --num_iteration 64)"
    )
    return p


def row_id(row: published.Row) -> str:
    seq = f"-{row.seq}" if row.seq else ""
    return f"{row.model.lower().replace(' ', '-')}{seq}-{row.precision}"


def row_argv(row: published.Row, args, out: Path) -> list[str]:
    """train_fsdp.py's arguments for `row`."""
    batch = str(row.batch) if args.batch_size == "table" else args.batch_size
    argv = [
        str(args.configs / row.config),
        row.model_type,
        "--batch_size",
        batch,
        "--enable_fp8",
        str(row.precision == "fp8"),
        "--json",
        str(out / f"{row_id(row)}.json"),
    ]
    return argv + [a for a in args.extra if a != "--"]


def command(row: published.Row, args, nproc: int, out: Path) -> list[str]:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    return [*torchrun, str(ROOT / "train_fsdp.py"), *row_argv(row, args, out)]


def run_row(cmd: list[str], log: Path) -> int:
    """Run one row in a session of its own, its output written to `log` line by line (a row stopped mid-run
    keeps it) and shown, torchrun's failure report left to the log. Stopped (Stopped, KeyboardInterrupt):
    its processes are stopped before this returns."""
    report = TorchrunReport()
    with log.open("w", buffering=1) as sink:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, start_new_session=True
        )
        try:
            for line in proc.stdout:
                sink.write(line)
                sys.stdout.writelines(report.feed(line))
                sys.stdout.flush()
            sys.stdout.writelines(report.close())
            return proc.wait()
        except BaseException:
            stop_row(proc)
            raise
        finally:
            proc.stdout.close()


def _process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    return tree


def stop_row(proc: subprocess.Popen, grace: float = STOP_GRACE_S) -> None:
    """SIGTERM to the process group of torchrun and of each of its descendants (torchrun starts every worker
    in a session of its own, out of reach of a signal to its group), then SIGKILL to those left after
    `grace` seconds."""
    groups = set()
    for pid in _process_tree(proc.pid):
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(pid))
    groups.discard(os.getpgrp())  # never this suite's own
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_group_alive(g) for g in groups):
            time.sleep(0.05)
        if not any(_group_alive(g) for g in groups):
            break
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)


def _group_alive(group: int) -> bool:
    return any(_live(pid) for pid in _members(group))


def _members(group: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group:
                found.append(int(stat.parent.name))
    return found


def _live(pid: int) -> bool:
    """True unless `pid` is gone or a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def table(rows: list[dict], gpu: str, why: str, per: str = "GPU") -> str:
    """The markdown table of the suite's results (`rows`: one dict per row, `result` None if it failed).
    `per`: what the figures are per (a CPU run's are per process, and not set beside AMD's)."""
    lines = [
        f"Compared with AMD's published {gpu} figures ({why})."
        if per == "GPU"
        else f"The rows of AMD's {gpu} table ({why}), run without a GPU: the figures are per process and "
        "not compared with AMD's, which are per GPU.",
        "",
        f"| model | precision | seq | batch/{per} | tokens/s/{per} | TFLOP/s/{per} (ours) "
        f"| TFLOP/s/{per} (AMD's count) | AMD {gpu} | vs AMD | peak GiB | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        row, res = r["row"], r["result"]
        seq = res["seq_len"] if res is not None else row["seq"]
        head = f"| {row['model']} | {row['precision'].upper()} | {seq or '-'} "
        amd = f"{row['value']} {'FPS/GPU' if row['unit'] == 'FPS/GPU' else ''}".strip()
        if res is None:
            error = (r["error"] or "").replace("|", "\\|")
            lines.append(head + f"| {row['batch']} | - | - | - | {amd} | - | - | {error} |")
            continue
        flops = res["tflops_per_gpu"]
        p = res["published"]
        ratio = f"{p['ratio']:.2f}x" if p.get("row") else "-"
        if res["model_type"] == "flux":
            ours_cell = f"{res['images_per_s_per_gpu']:.2f} FPS/{per}"
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


def write_tables(out: Path, results: list[dict], gpu: str, why: str, device: str, per: str) -> str:
    """throughput.json and throughput.md, each written whole (a temporary file renamed): the table so far."""
    record = {"reference_gpu": gpu, "why": why, "device": device, "rows": results}
    write_text_atomic(out / "throughput.json", json.dumps(record, indent=2) + "\n")
    text = table(results, gpu, why, per)
    write_text_atomic(out / "throughput.md", text)
    return text


def main(argv: list[str]) -> int:
    try:
        args = parser().parse_args(argv)
    except ConfigError as err:
        print(f"train_fsdp.py --suite: error: {err}", file=sys.stderr)
        return 2
    import torch  # after --help

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    name = torch.cuda.get_device_name(0) if gpus else "CPU"
    memory = torch.cuda.get_device_properties(0).total_memory / 2**30 if gpus else None
    gpu, why = published.reference_gpu(name, memory)
    if args.gpu:
        gpu, why = args.gpu, f"{args.gpu}, as asked (--gpu)"
    nproc = args.nproc_per_node or max(gpus, 1)
    # absolute: the rows run from the repository's root
    out = (args.output_dir or Path("results") / "throughput" / time.strftime("%Y%m%d-%H%M%S")).absolute()
    args.configs = args.configs.absolute()
    wanted = [w for w in args.only.split(",") if w]
    rows = [
        r for r in published.TABLES[gpu] if not wanted or any(w in row_id(r) or w in r.model for w in wanted)
    ]
    try:
        if not rows:
            raise ConfigError(
                f"--only {args.only!r} matches no row of the {gpu} table: its rows are "
                f"{', '.join(row_id(r) for r in published.TABLES[gpu])}"
            )
        specs = {row_id(r): model_for(parse_args(row_argv(r, args, out))) for r in rows}  # every row's flags
        check_writable(out, "--output_dir", folder=True, probe=True)
    except ConfigError as err:
        print(f"train_fsdp.py --suite: error: {err}", file=sys.stderr)
        return 2
    per = "GPU" if gpus else "process"
    print(
        f"train_fsdp.py --suite: {len(rows)} row(s) of the {gpu} table ({why}) on {nproc} x {name}; "
        f"results in {out}",
        flush=True,
    )
    results: list[dict] = []
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def on_signal(signum, _frame):
        for s in previous:  # a second Ctrl-C does not cut the stop short
            signal.signal(s, signal.SIG_IGN)
        raise Stopped(signum)

    for s in previous:
        signal.signal(s, on_signal)
    try:
        for row in rows:
            results.append(run_one(row, args, nproc, out, specs[row_id(row)]))
            write_tables(out, results, gpu, why, name, per)
    except (Stopped, KeyboardInterrupt) as stop:
        signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
        done = len(results)
        if done < len(rows):
            row = rows[done]
            results.append(
                {
                    "row": vars(row),
                    "command": command(row, args, nproc, out),
                    "result": None,
                    "error": f"stopped by {signal.Signals(signum).name}",
                }
            )
        text = write_tables(out, results, gpu, why, name, per)
        print(
            f"\n{text}\ntrain_fsdp.py --suite: stopped by {signal.Signals(signum).name}; the table of the "
            f"rows before is in {out / 'throughput.md'}",
            file=sys.stderr,
            flush=True,
        )
        return 128 + signum
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print("\n" + table(results, gpu, why, per), flush=True)
    print(f"train_fsdp.py --suite: {out / 'throughput.md'}, {out / 'throughput.json'}", flush=True)
    return 0 if all(r["result"] for r in results) else 1


def run_one(row: published.Row, args, nproc: int, out: Path, spec) -> dict:
    """One row: said not to fit without starting it, else run; its entry of throughput.json."""
    cmd = command(row, args, nproc, out)
    try:
        check_this_node(spec, nproc, nproc)
    except CannotFit as err:
        print(f"==> {row_id(row)}: not run: {err}", flush=True)
        return {"row": vars(row), "command": cmd, "result": None, "error": err.short}
    print(f"==> {row_id(row)}: {' '.join(cmd)}", flush=True)
    log = out / f"{row_id(row)}.log"
    status = run_row(cmd, log)
    result_file = out / f"{row_id(row)}.json"
    done = status == 0 and result_file.exists()
    result = json.loads(result_file.read_text()) if done else None
    return {
        "row": vars(row),
        "command": cmd,
        "result": result,
        "error": None if done else _error(log, status),
    }


def _error(log: Path, status: int) -> str:
    """The row's error line (train_fsdp.py's own), else its exit status."""
    lines = [ln for ln in log.read_text().splitlines() if ln.startswith("train_fsdp.py: ")]
    return lines[-1].removeprefix("train_fsdp.py: ") if lines else f"exit status {status}, see {log}"
