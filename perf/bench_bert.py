"""BERT-Large training step on one GPU: ours (the trainer's own `train_step`) vs Hugging Face, same run.

    python perf/bench_bert.py [--variants hf,eager,compiled] [--steps 30] [--tiny]

Variants: hf; ours eager, compiled, compiled_fp8 (the trainer's PRECISION=fp8: FP8
matmuls in the encoder layers through Transformer Engine, else torchao float8 tensorwise), compiled_fp8native
(our own delayed-scaling FP8 linear, training.fp8.native.Fp8Linear, each FFN fused into `FusedFp8MLP`),
compiled_fp8native_unfused (the same, the FFN as two FP8 linears). In a compiled variant's name `_cudagraphs`
adds torch.compile's CUDA graphs (mode reduce-overhead; e.g. compiled_fp8native_cudagraphs), `_maxautotune`
mode max-autotune (CUDA graphs, GEMM autotuning, coordinate-descent tuning of the generated kernels),
`_bf16res` the residual stream in bf16 (the trainer's RESIDUAL_DTYPE=bf16);
`variant:attention` runs it with that attention (e.g. compiled:sdpa_cudnn), else --attention's.

Ours: BertForPackedPretraining, 48 packed 512-token rows per step, rows filled like the data pipeline's
(1-3 sequences, about 2 on average), 76 max predictions per sequence, LAMB, bf16 autocast.
Peer: transformers.BertForPreTraining (attn_implementation="sdpa"), bf16 autocast, AdamW(fused=True),
48 padded rows of one sequence each, MLM labels on 76 positions per row plus NSP.
A sample is one unpacked sequence, as MLPerf counts. Times are CUDA-event medians after warm-up; inputs
are random token ids (never zeros), rotated over a pool of batches. Prints a table last and writes JSON
to $OUT/bench_bert.json when OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from training.bert import data  # noqa: E402
from training.bert.attention import choose_attention  # noqa: E402
from training.bert.model import BertForPackedPretraining, BertShape, flops_per_step  # noqa: E402
from training.bert.optim import Lamb, param_groups  # noqa: E402
from training.bert.train import (  # noqa: E402
    apply_compile,
    apply_data_parallel,
    autocast_context,
    fp8_settings,
    train_step,
)
from training.common import dist  # noqa: E402
from training.fp8 import apply_fp8  # noqa: E402

SEQ, MAX_PRED = 512, 76
ROWS = 48  # rows per step; --rows changes it


def random_sequence(rng, length: int, vocab: int):
    ids = rng.integers(1000, vocab, length)
    split = int(rng.integers(2, length - 1))
    ids[0], ids[split], ids[-1] = 101, 102, 102
    seg = (np.arange(length) > split).astype(np.int8)
    n_pred = min(MAX_PRED, max(1, round(0.15 * length)))
    candidates = np.setdiff1d(np.arange(1, length - 1), [split])
    pos = np.sort(rng.choice(candidates, n_pred, replace=False))
    return ids, seg, pos, rng.integers(1000, vocab, n_pred), int(rng.integers(0, 2))


def packed_rows(rng, n_rows: int, vocab: int, seq: int = SEQ):
    """Rows like the packer's: 1, 2 or 3 sequences (1/4, 1/2, 1/4: 2 on average) filling 480-512 tokens."""
    rows = []
    for _ in range(n_rows):
        k = int(rng.choice([1, 2, 3], p=[0.25, 0.5, 0.25]))
        total = int(rng.integers(seq - 32, seq + 1))
        lens = np.array([total])
        while k > 1 and (len(lens) < k or lens.min() < 24):  # k sequences of at least 24 tokens each
            cuts = np.sort(rng.choice(np.arange(24, total - 24), k - 1, replace=False))
            lens = np.diff(np.concatenate([[0], cuts, [total]])).astype(int)
        seqs = [random_sequence(rng, int(n), vocab) for n in lens]
        offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
        rows.append((
            np.concatenate([s[0] for s in seqs]), np.concatenate([s[1] for s in seqs]),
            np.concatenate([s[2] + o for s, o in zip(seqs, offsets)]), np.concatenate([s[3] for s in seqs]),
            lens, np.array([len(s[2]) for s in seqs]), np.array([s[4] for s in seqs]),
        ))  # fmt: skip
    return rows


def time_steps(step_fn, warmup: int, steps: int) -> list[float]:
    for _ in range(warmup):
        step_fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step_fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def matmul_peak(device) -> float:
    a, b = (torch.randn(8192, 8192, device=device, dtype=torch.bfloat16) for _ in range(2))
    ms = statistics.median(time_steps(lambda: a @ b, 5, 20))
    return 2 * 8192**3 / ms / 1e9  # TFLOP/s


def print_profile(step_fn, steps: int = 3, top: int = 25) -> None:
    """GPU kernel time per step, largest first (torch.profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step_fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_time_total > 0]
    events.sort(key=lambda e: e.device_time_total, reverse=True)
    total = sum(e.device_time_total for e in events) / steps / 1e3
    print(f"profile: {total:.1f} ms of GPU kernels per step")
    for e in events[:top]:
        print(f"  {e.device_time_total / steps / 1e3:7.2f} ms  x{e.count // steps:<5} {e.key[:110]}")


COMPILE_MODES = {"_cudagraphs": "reduce-overhead", "_maxautotune": "max-autotune"}
MODIFIERS = (*COMPILE_MODES, "_bf16res")  # variant name suffixes
OURS = ("eager", "compiled", "compiled_fp8", "compiled_fp8native", "compiled_fp8native_unfused")


def bench_ours(
    shape,
    pool,
    lens,
    compiled: bool,
    attention: str,
    device,
    warmup,
    steps,
    profile=False,
    compile_mode: str | None = None,
    precision: str = "bf16",
    fp8_backend: str = "auto",
    fuse_fp8: bool = True,
    residual_dtype: torch.dtype | None = None,
):
    torch.manual_seed(0)
    info = dist.init_distributed()
    model = BertForPackedPretraining(shape, choose_attention(attention)).to(device)
    model.set_residual_dtype(residual_dtype)
    # the trainer's FP8 settings (each FFN fused with the native backend), or the FFNs linear by linear
    settings = fp8_settings(fp8_backend, fuse_fp8) if precision == "fp8" else None
    fp8 = apply_fp8(model, settings)
    optimizer = Lamb(param_groups(model, 0.01), lr=1e-4, betas=(0.6, 0.99), compiled=compiled)
    train_model = apply_compile(apply_data_parallel(model, info), compiled, compile_mode)
    batches = [data.pad_static(b, ROWS) if compiled else b for b in pool]
    it = iter(batches * 10_000)
    autocast = autocast_context(precision, device, fp8)
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    losses = [train_step(train_model, optimizer, it, 1, autocast, info) for _ in range(warmup)]
    warm_s = time.perf_counter() - t0
    times = time_steps(lambda: train_step(train_model, optimizer, it, 1, autocast, info), 0, steps)
    if profile:
        print_profile(lambda: train_step(train_model, optimizer, it, 1, autocast, info))
    seqs = [b.num_sequences for b in pool]
    masked = sum(int((b.mlm_labels >= 0).sum()) for b in pool)
    flops = flops_per_step(shape, lens, masked, sum(seqs)) / len(pool)  # real tokens only, not padding
    # Every rank steps in lockstep (DDP): the job's samples per step are world_size times one rank's.
    return {"ms": statistics.median(times), "samples_per_step": info.world_size * sum(seqs) / len(pool),
            "flops": flops, "world_size": info.world_size,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "warmup_s": warm_s,
            "first_loss": float(losses[0]), "spread_ms": [min(times), max(times)],
            "fp8": fp8.description, "attention": model.layers[0].attn_impl}  # fmt: skip


def bench_hf(shape, device, warmup, steps, rng):
    import transformers

    cfg = transformers.BertConfig(vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
                                  num_hidden_layers=shape.num_hidden_layers,
                                  num_attention_heads=shape.num_attention_heads,
                                  intermediate_size=shape.intermediate_size,
                                  attn_implementation="sdpa")  # fmt: skip
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

    def step():
        ids, labels, nsp = (t.to(device, non_blocking=True) for t in next(it))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=labels, next_sentence_label=nsp).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    torch.cuda.reset_peak_memory_stats()
    times = time_steps(step, warmup, steps)
    # Work it really does: every token through every layer, full 512x512 attention, MLM head on all tokens.
    flops = flops_per_step(shape, [SEQ] * ROWS, ROWS * SEQ, ROWS)
    return {"ms": statistics.median(times), "samples_per_step": ROWS, "flops": flops,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
            "spread_ms": [min(times), max(times)]}  # fmt: skip


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
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="hf,eager,compiled")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model (smoke test of this script)")
    ap.add_argument(
        "--attention", default="auto", help="our attention implementation (see training.bert.attention)"
    )
    ap.add_argument("--profile", action="store_true", help="print the top GPU kernels of our variants")
    ap.add_argument(
        "--data", type=Path, help="a prepared BERT data folder: time batches of its shards instead"
    )
    ap.add_argument("--rows", type=int, default=48, help="packed rows per step")
    args = ap.parse_args()
    rank, local_rank = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    say = print if rank == 0 else (lambda *a, **k: None)  # torchrun: rank 0 reports
    shape = BertShape(num_hidden_layers=2) if args.tiny else BertShape()
    rng = np.random.default_rng(rank)
    global ROWS
    ROWS = args.rows
    if args.data:  # the first batches of the prepared shards, as the trainer would read them
        shard_rows = [r for shard in data.list_shards(args.data / "hdf5" / "packed_data")[:2]
                      for r in data.read_rows(shard)]  # fmt: skip
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
        "peak_tflops": matmul_peak(device),
    }
    say(f"{results['gpu']} torch {results['torch']}: bf16 matmul peak {results['peak_tflops']:.0f} TFLOP/s")
    runs = {}
    for variant in args.variants.split(","):
        if variant == "hf":
            runs[variant] = bench_hf(shape, device, args.warmup, args.steps, rng)
        elif (name := re.sub("|".join(MODIFIERS), "", variant.partition(":")[0])) in OURS:
            mode = next((m for k, m in COMPILE_MODES.items() if k in variant), None)
            residual = torch.bfloat16 if "_bf16res" in variant else None
            runs[variant] = bench_ours(shape, pool, lens, name != "eager",
                                       variant.partition(":")[2] or args.attention, device,
                                       args.warmup, args.steps, args.profile,
                                       compile_mode=mode,
                                       precision="fp8" if "fp8" in name else "bf16",
                                       fp8_backend="native" if "native" in name else "auto",
                                       fuse_fp8=not name.endswith("unfused"),
                                       residual_dtype=residual)  # fmt: skip
        else:
            raise SystemExit(f"unknown variant {variant}")
        r = runs[variant]
        r["samples_per_s"] = r["samples_per_step"] / r["ms"] * 1e3
        r["tflops"] = r["flops"] / r["ms"] / 1e9
        r["mfu"] = r["tflops"] / results["peak_tflops"]
        say(f"  {variant}: {json.dumps(r)}", flush=True)
        torch.cuda.empty_cache()
    if any(v.startswith("compiled") for v in runs):
        results["attention"] = choose_attention(args.attention)
        results["compiled_vs_eager_loss_rel_diff"] = check_fast_path(
            shape, pool, device, results["attention"]
        )
    results["runs"] = runs
    if os.environ.get("OUT") and rank == 0:
        world = int(os.environ.get("WORLD_SIZE", 1))
        name = "bench_bert.json" if world == 1 else f"bench_bert_{world}gpu.json"
        Path(os.environ["OUT"], name).write_text(json.dumps(results, indent=2))
    base = runs.get("hf", {}).get("samples_per_s")
    say("\n| variant | samples/s | ms/step | samples/step | model TFLOP/s | MFU | peak GiB | vs HF |")
    say("|---|---|---|---|---|---|---|---|")
    for name, r in runs.items():
        ratio = f"{r['samples_per_s'] / base:.2f}x" if base else "-"
        say(f"| {name} | {r['samples_per_s']:.0f} | {r['ms']:.1f} | {r['samples_per_step']:.1f} | "
              f"{r['tflops']:.0f} | {r['mfu']:.1%} | {r['peak_gib']:.1f} | {ratio} |")  # fmt: skip
    if "compiled_vs_eager_loss_rel_diff" in results:
        say(
            f"compiled ({results['attention']}) vs eager (sdpa) loss, relative difference: "
            f"{results['compiled_vs_eager_loss_rel_diff']:.2e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
