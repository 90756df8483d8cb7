"""BERT-Large training step on one GPU: ours (the trainer's own build and step) vs Hugging Face, same run.

    python -m perf.bench_bert [--config configs/bert/config_H100_1x8x48.sh] [--set 'NAME=VALUE ...']
        [--variant 'fp8: COMPILE=1 PRECISION=fp8 FP8_BACKEND=native' ...] [--peer 'hf:' | --peer none]
        [--reference 'LABEL: NAME=VALUE ...'] [--steps 30] [--warmup 8] [--tiny] [--rows 48] [--data DIR]

A variant is BERT's config (`--config`, else its typed defaults; `perf/lib/overrides.py`) with its own
overrides in the config's names (COMPILE, COMPILE_MODE, PRECISION, FP8_BACKEND, FP8_FAST_ACCUM, FP8_CASTS,
RESIDUAL_DTYPE, ATTENTION, OPT_LAMB_BETA_1, ...), built by the trainer's `build_run` (`BertConfig.run_spec`)
and trained by its step at the rate LR (fixed: the bench runs no schedule). Each row records its overrides.

Ours: BertForPackedPretraining, 48 packed 512-token rows per step, rows filled like the data pipeline's (1-3
sequences, about 2 on average), 76 max predictions per sequence, LAMB. Peer (`--peer`, default `hf:`; it
takes none of the settings): transformers.BertForPreTraining (attn_implementation="sdpa"), bf16 autocast,
AdamW(fused=True), 48 padded rows of one sequence each, MLM labels on 76 positions per row plus NSP. A sample
is one unpacked sequence, as MLPerf counts. Times are CUDA-event medians after warm-up; inputs are random
token ids (never zeros), rotated over a pool of batches. Prints a table last and writes JSON to
$OUT/bench_bert.json when OUT is set.

Loss parity (`perf/lib/parity.py`): each of our variants' per-step losses (every step, warm-up included)
against the reference variant's (`--reference`, run first: eager), on the same initial weights (one seed)
and the same batches in the same order. The peer trains other batches (one unpadded sequence per row) with
AdamW: its losses are recorded, not compared (`perf/curve_parity.py bert` compares Hugging Face's model with
ours on the same weights, batches and LAMB).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from perf.lib import overrides, parity, timing
from perf.lib.bert_rows import MAX_PRED, SEQ, packed_rows
from perf.lib.bert_rows import ROWS as DEFAULT_ROWS
from perf.lib.timing import print_profile
from training.bert import data
from training.bert.build import RunSpec, build_run
from training.bert.config import BertConfig
from training.bert.model import BertForPackedPretraining, BertShape, flops_per_step
from training.common import dist

ROWS = DEFAULT_ROWS  # --rows changes it


def time_steps(step_fn, warmup: int, steps: int) -> list[float]:
    return timing.time_steps(step_fn, warmup, steps, torch.device("cuda", torch.cuda.current_device()))


# what the bench sets of BERT's required settings, which it does not read: no data, no checkpoint, its own
# rows; LR is the fixed rate it trains at
BENCH_VALUES = {"DATADIR": "/nonexistent", "INIT_CHECKPOINT": "none", "MAX_STEPS": "1", "LR": "1e-4"}
DEFAULT_VARIANTS = ("compiled: COMPILE=1",)
DEFAULT_PEERS = ("hf:",)
REFERENCE = "eager: COMPILE=0 PRECISION=bf16 RESIDUAL_DTYPE=fp32"


def bench_ours(spec: RunSpec, pool, lens, warmup, steps, profile=False) -> dict:
    torch.manual_seed(0)
    info = dist.init_distributed()
    model, step, chosen = build_run(spec, info)
    batches = [data.pad_static(b, ROWS) if spec.compile else b for b in pool]
    it = iter(batches * 10_000)
    torch.cuda.reset_peak_memory_stats()
    losses = []

    def one_step():
        losses.append(step(it))

    t0 = time.perf_counter()
    for _ in range(warmup):
        one_step()
    warm_s = time.perf_counter() - t0
    times = time_steps(one_step, 0, steps)
    if profile:
        print_profile(one_step)
    seqs = [b.num_sequences for b in pool]
    masked = sum(int((b.mlm_labels >= 0).sum()) for b in pool)
    flops = flops_per_step(spec.shape, lens, masked, sum(seqs)) / len(pool)  # real tokens only, not padding
    # Every rank steps in lockstep (DDP): the job's samples per step are world_size times one rank's.
    return {
        "ms": statistics.median(times),
        "samples_per_step": info.world_size * sum(seqs) / len(pool),
        "flops": flops,
        "world_size": info.world_size,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        "warmup_s": warm_s,
        "first_loss": float(losses[0]),
        "losses": parity.as_floats(losses),
        "spread_ms": [min(times), max(times)],
        "compiled": spec.compile,
        "fp8_matmuls": chosen["precision"] == "fp8",
        "fp8": chosen["fp8"],
        "attention": chosen["attention"],
    }


def bench_hf(shape, device, warmup, steps, rng):
    import transformers

    cfg = transformers.BertConfig(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        intermediate_size=shape.intermediate_size,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    pool = []
    for _ in range(8):
        ids = torch.from_numpy(rng.integers(1000, shape.vocab_size, (ROWS, SEQ))).long()
        labels = torch.full((ROWS, SEQ), -100, dtype=torch.long)
        for r in range(ROWS):
            pos = torch.from_numpy(rng.choice(np.arange(1, SEQ - 1), MAX_PRED, replace=False))
            labels[r, pos] = ids[r, pos]
        nsp = torch.from_numpy(rng.integers(0, 2, ROWS)).long()
        pool.append([t.pin_memory() for t in (ids, labels, nsp)])
    it = iter(pool * 10_000)

    losses = []

    def step():
        ids, labels, nsp = (t.to(device, non_blocking=True) for t in next(it))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=labels, next_sentence_label=nsp).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())

    torch.cuda.reset_peak_memory_stats()
    times = time_steps(step, warmup, steps)
    # Work it really does: every token through every layer, full 512x512 attention, MLM head on all tokens.
    flops = flops_per_step(shape, [SEQ] * ROWS, ROWS * SEQ, ROWS)
    return {
        "ms": statistics.median(times),
        "samples_per_step": ROWS,
        "flops": flops,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        "spread_ms": [min(times), max(times)],
        "losses": parity.as_floats(losses),
    }


def check_fast_path(shape, pool, device, attention: str) -> float:
    """Relative difference of the compiled bf16 loss with our attention kernel against the eager bf16
    loss with SDPA's masked attention, same weights and batch (no dropout: deterministic)."""
    torch.manual_seed(1)
    model = BertForPackedPretraining(shape, "sdpa").to(device).eval()
    from training.bert.model import pretraining_loss

    b = pool[0].to(device)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        eager = pretraining_loss(*model(b), b)
        for layer in model.layers:
            layer.attn_impl = attention
        fast = torch.compile(model)
        s = data.pad_static(pool[0], ROWS).to(device)
        compiled = pretraining_loss(*fast(s), s)
    return float((compiled - eager).abs() / eager.abs())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    overrides.add_arguments(ap, DEFAULT_VARIANTS, REFERENCE)
    ap.add_argument(
        "--peer",
        action="append",
        default=None,
        metavar="'LABEL:'",
        help=f"Hugging Face's BERT, repeatable ('none': none; default: {DEFAULT_PEERS[0]!r})",
    )
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model (smoke test of this script)")
    ap.add_argument("--profile", action="store_true", help="print the top GPU kernels of our variants")
    ap.add_argument(
        "--data", type=Path, help="a prepared BERT data folder: time batches of its shards instead"
    )
    ap.add_argument("--rows", type=int, default=48, help="packed rows per step")
    args = ap.parse_args()
    shape = BertShape(num_hidden_layers=2) if args.tiny else BertShape()
    try:  # every variant's config before anything runs: a bad one stops the call at once
        plan = overrides.from_args(args, [] if args.peer == ["none"] else (args.peer or list(DEFAULT_PEERS)))
        specs = variant_specs(plan, args.config, args.rows, shape)
    except overrides.OverrideError as err:
        raise SystemExit(f"bench_bert: {err}") from None
    reference = plan.reference.label if plan.reference else "none"
    rank, local_rank = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    say = print if rank == 0 else (lambda *a, **k: None)  # torchrun: rank 0 reports
    rng = np.random.default_rng(rank)
    global ROWS
    ROWS = args.rows
    if args.data:  # the first batches of the prepared shards, as the trainer would read them
        shard_rows = [
            r
            for shard in data.list_shards(args.data / "hdf5" / "packed_data")[:2]
            for r in data.read_rows(shard)
        ]
        rows = [shard_rows[i * ROWS : (i + 1) * ROWS] for i in range(8)]
    else:
        rows = [packed_rows(rng, ROWS, shape.vocab_size) for _ in range(8)]
    lens = [int(n) for batch_rows in rows for row in batch_rows for n in row[4]]
    pool = [data.collate(r, SEQ) for r in rows]
    for b in pool:
        b.__dict__.update({k: v.pin_memory() for k, v in b.__dict__.items() if isinstance(v, torch.Tensor)})
    results = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "peak_tflops": timing.matmul_peak(device),
        "config": str(args.config) if args.config else None,
    }
    say(f"{results['gpu']} torch {results['torch']}: bf16 matmul peak {results['peak_tflops']:.0f} TFLOP/s")
    runs = {}
    for v in plan.runs:
        peer = v.label in plan.peers
        if peer:
            r = bench_hf(shape, device, args.warmup, args.steps, rng)
        else:
            r = bench_ours(specs[v.label], pool, lens, args.warmup, args.steps, args.profile)
        r["samples_per_s"] = r["samples_per_step"] / r["ms"] * 1e3
        r["tflops"] = r["flops"] / r["ms"] / 1e9
        r["mfu"] = r["tflops"] / results["peak_tflops"]
        runs[v.label] = {"model": "hf" if peer else "ours", "overrides": v.overrides, **r}
        say(f"  {v.label}: {json.dumps(runs[v.label])}", flush=True)
        torch.cuda.empty_cache()
    if compiled := next((r for r in runs.values() if r.get("compiled")), None):
        results["attention"] = compiled["attention"]
        results["compiled_vs_eager_loss_rel_diff"] = check_fast_path(
            shape, pool, device, results["attention"]
        )
    uniform = parity.uniform_loss(shape.vocab_size) + math.log(2)  # masked LM + next-sentence prediction
    skip = dict.fromkeys(plan.peers, "other batches (one unpacked sequence per row) and AdamW")
    parity.check_all(runs, reference, uniform, skip)
    results["runs"] = runs
    if os.environ.get("OUT") and rank == 0:
        world = int(os.environ.get("WORLD_SIZE", 1))
        name = "bench_bert.json" if world == 1 else f"bench_bert_{world}gpu.json"
        Path(os.environ["OUT"], name).write_text(json.dumps(results, indent=2))
    print_table(runs, reference, say)
    if "compiled_vs_eager_loss_rel_diff" in results:
        say(
            f"compiled ({results['attention']}) vs eager (sdpa) loss, relative difference: "
            f"{results['compiled_vs_eager_loss_rel_diff']:.2e}"
        )
    return 0


def variant_specs(
    plan: overrides.Plan, config: Path | None, rows: int, shape: BertShape
) -> dict[str, RunSpec]:
    """Each of our variants' run: the config (or BERT's defaults) with its overrides, at `shape`. The peer's
    variants take no settings."""
    if said := sorted(v.label for v in plan.runs if v.label in plan.peers and v.overrides):
        raise overrides.OverrideError(
            f"peer variant(s) {', '.join(said)}: Hugging Face's BERT takes no settings"
        )
    start = overrides.base("bert", config, {**BENCH_VALUES, "BATCHSIZE": str(rows)})
    ours = [v for v in plan.runs if v.label not in plan.peers]
    return {v.label: overrides.build(BertConfig, start, v.overrides).run_spec(shape) for v in ours}


def print_table(runs: dict, reference: str, say) -> None:
    """The runs as a Markdown table: each one's overrides, speed, speed against the peer's and loss parity."""
    base = next((r["samples_per_s"] for r in runs.values() if r["model"] == "hf"), None)
    say(f"\nloss parity against {reference} (tolerance per step: {parity.TOLERANCE})")
    say(
        "| variant | overrides | samples/s | ms/step | samples/step | model TFLOP/s | MFU | peak GiB | vs HF "
        "| parity |"
    )
    say("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in runs.items():
        said = " ".join(f"{k}={val}" for k, val in r["overrides"].items()) or "-"
        ratio = parity.ratio_cell(r["samples_per_s"] / base if base else None, r.get("parity"))
        say(
            f"| {name} | {said} | {r['samples_per_s']:.0f} | {r['ms']:.1f} | {r['samples_per_step']:.1f} | "
            f"{r['tflops']:.0f} | {r['mfu']:.1%} | {r['peak_gib']:.1f} | {ratio} | "
            f"{parity.column(r.get('parity'))} |"
        )


if __name__ == "__main__":
    sys.exit(main())
