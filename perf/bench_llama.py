"""Llama 3.1 8B training throughput under FSDP2: ours vs Hugging Face, BF16 and FP8, side by side.

    torchrun --nproc_per_node=4 -m perf.bench_llama [--config configs/llama31_8b/config_H200_1x8x1_8b.sh]
        [--set 'COMPILE=1'] [--variant 'fp8: PRECISION=fp8 FP8_BACKEND=native' ...]
        [--peer 'hf-bf16:' ...] [--reference 'LABEL: NAME=VALUE ...'] [--steps 10] [--warmup 3]
        [--seq 8192] [--mbs 1] [--accum 1] [--layers 32]
    torchrun --nproc_per_node=2 -m perf.bench_llama --tiny        # CPU (gloo) smoke test of this script

A variant is the 8B's config (`--config`, else its typed defaults; `perf/lib/overrides.py`) with its own
overrides in the config's names, built by the trainer's `build_run` at the bench's shape; `--peer` variants
are built from the same settings on the peer's model. Full Llama 3.1 8B (ours: training.llama.model.Llama
through the trainer's own features and step, `parallel.apply_features` and `step.train_step`; peer:
transformers.LlamaForCausalLM built from the same config, attn_implementation="sdpa", random init, nothing
downloaded), sequence 8192, micro-batch 1 per GPU, both sharded the same way: FSDP2 fully_shard per decoder
block then the root, bf16 compute parameters, fp32 master weights and gradient reduce (the trainer's
apply_fsdp), each block torch.compile'd with COMPILE=1, AdamW with clipping at 1.0, float32 cross-entropy on
rows of the bundled Wikipedia excerpt (`perf/lib/rows.py`; ours: the trainer's loss, compiled with the blocks,
its AdamW (ADAMW_IMPL) with the clip folded into its kernel, and the loss averaged over ranks as the trainer
logs it; the peer: eager, its own loss, torch's fused AdamW and clip_grad_norm_, Hugging Face's gradient
checkpointing with ACTIVATION_CHECKPOINTING=1). FP8 (PRECISION=fp8, the blocks' linear layers) is torchao's
float8 (FP8_BACKEND=torchao) or our own (FP8_BACKEND=native, its MLP one function; the peer's MLPs linear by
linear). A step is forward + backward + clip + optimizer; times are CUDA-event medians on rank 0 after
warm-up; peak memory is the largest max_memory_allocated over ranks, of the steps after the first (the
first's apart: `first_step_peak_gib`).
Model FLOPs count (printed with the results):
    FLOPs per sequence = 6 x N x seq + 6 x seq^2 x hidden x layers    (causal attention)
with N the parameters without the input embedding table (a lookup), lm_head included: 7.505e9 for 8B, which
gives 421.7 TFLOP per 8192-token sequence (NVIDIA's MODEL_TFLOP_PER_SAMPLE=421.59). Prints a table last and
writes $OUT/bench_llama.json when OUT is set; each run records its overrides.

Loss parity (`perf/lib/parity.py`): every variant's per-step losses against the reference variant's
(`--reference`, run first: ours eager with PyTorch's SDPA and AdamW), all from the same initial weights (the
peer's are ours: `perf/lib/peers.py`) and the same batches. A variant that fails prints "invalid" instead of
its speed ratios.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist

from perf.lib import overrides, parity, peers, processes, shapes
from perf.lib.rows import llama_batches
from perf.lib.schedules import llama_lr
from perf.lib.timing import matmul_peak, print_profile, step_record, take_peak, time_steps, versions
from training.fp8 import apply_fp8
from training.llama import optim, parallel
from training.llama.build import RunSpec, build_run
from training.llama.model import PRESETS, LlamaShape
from training.llama.step import train_step
from training.llama31_8b.config import LlamaPretrainConfig

# what the bench sets of the 8B's required settings, which it does not read (no data, its own batch and rate)
BENCH_VALUES = {"DATADIR": "/nonexistent", "GBS": "1", "MBS": "1", "MAX_LR": "1e-4", "WARMUP_STEPS": "0"}
DEFAULT_VARIANTS = ("bf16:", "fp8: PRECISION=fp8 FP8_BACKEND=torchao")
DEFAULT_PEERS = ("hf-bf16:", "hf-fp8: PRECISION=fp8 FP8_BACKEND=torchao")
REFERENCE = "reference: COMPILE=0 ATTENTION=sdpa ADAMW_IMPL=torch"


def bench(label: str, spec: RunSpec, peer: bool, shape: LlamaShape, args, device: torch.device, mesh) -> dict:
    compiled = spec.features.compile
    if spec.features.fp8 is not None and spec.features.fp8.backend == "torchao" and device.type != "cuda":
        return {"skipped": "torchao's FP8 needs a GPU"}
    torch.manual_seed(0)
    world = dist.get_world_size()
    layout = parallel.Parallelism(world, 1, 1, 1, world, args.accum)
    ours = not peer
    if ours:  # the trainer's build, features and step (`training.llama.step.train_step`: its loss, compiled
        # with the blocks, and its clip, folded into the fused AdamW)
        model, trainer_step, applied = build_run(spec, device, mesh, layout)
        fp8, attention, adamw = applied.fp8, applied.attention, applied.optimizer
    else:  # the peer: the same sharding and FP8 swap, Hugging Face's own activation checkpointing, what a
        # user of its model writes: its float32 cross-entropy, torch's fused AdamW and clip_grad_norm_
        fp8_settings = spec.features.fp8
        if fp8_settings is not None:  # its MLPs linear by linear; FP8 all-gathers where FSDP2 shards
            gather = fp8_settings.gather_in_fp8 and mesh is not None
            fp8_settings = replace(fp8_settings, fuse_mlp=None, gather_in_fp8=gather)
        param_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        model = peers.hf_llama(shape)
        init_first = device.type != "cuda"  # as `build_run`: on the CPU the full weights, then shards
        if init_first:
            model.to_empty(device=device)
            peers.initialize_hf(model, shape, device)
        fp8 = apply_fp8(model, fp8_settings)
        if spec.features.activation_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        parallel.apply_compile(model, compiled)
        reduce_dtype = torch.float32 if spec.features.grad_reduce_in_fp32 else torch.bfloat16
        parallel.apply_fsdp(model, mesh, param_dtype, spec.features.reshard_after_forward, reduce_dtype)
        if not init_first:
            model.to_empty(device=device)
            peers.initialize_hf(model, shape, device)
        fp8.weights_changed(model)
        model.train()
        optimizer, adamw = optim.build_optimizer(
            model, 1e-4, (0.9, 0.95), 1e-5, 0.1, fused=device.type == "cuda", impl="torch"
        )
        attention = "sdpa"
        # no FSDP bf16 parameters (one process on a GPU): bf16 through autocast
        autocast = torch.autocast("cuda", torch.bfloat16) if mesh is None and device.type == "cuda" else None
        sync_each = spec.step.sync_each_micro_batch
        peer_step = peers.hf_step(
            model, optimizer, clip=1.0, autocast=autocast, fp8=fp8, sync_each=sync_each, mean_over_ranks=True
        )
    rows = llama_batches(32, args.mbs, args.seq, shape.vocab_size, device, dist.get_rank())
    it, losses = iter(rows * 100_000), []

    def micro_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(b[:, :-1], b[:, 1:]) for b in (next(it) for _ in range(args.accum))]

    def step():
        lr = llama_lr(len(losses), 10)
        if ours:
            losses.append(train_step(trainer_step, micro_batches(), lr)[0])
        else:
            losses.append(peer_step(micro_batches(), lr))

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.reset_accumulated_memory_stats()
    t0 = time.perf_counter()
    step()  # the first step compiles (native FP8 calibrates first)
    first_step_s = time.perf_counter() - t0
    first_peak = take_peak(device)  # `peak_gib` is the later steps'
    host: list[float] = []
    times = time_steps(step, args.warmup, args.steps, device, host)
    if args.profile:
        print_profile(step, steps=2, top=30, show=dist.get_rank() == 0, title=f"{label}, rank 0:")
    peaks = torch.tensor([first_peak, take_peak(device)], device=device)
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
    first_peak, peak = peaks.tolist()
    retries = torch.tensor(  # the caching allocator freeing cached blocks to satisfy one (a device sync)
        torch.cuda.memory_stats(device).get("num_alloc_retries", 0) if device.type == "cuda" else 0,
        device=device,
    )
    dist.all_reduce(retries, op=dist.ReduceOp.MAX)
    ms = statistics.median(times)
    tokens_per_gpu = args.accum * args.mbs * args.seq / ms * 1e3
    result = {
        "ms": ms,
        "spread_ms": [min(times), max(times)],
        "times_ms": [round(t, 1) for t in times],
        "host_ms": statistics.median(host) if host else None,
        "tokens_per_s_per_gpu": tokens_per_gpu,
        "model_tflops_per_gpu": shape.flops_per_token(args.seq) * tokens_per_gpu / 1e12,
        **step_record(first_step_s, first_peak, peak, losses),
        "alloc_retries": int(retries),
        "compiled": compiled,
        "fp8_matmuls": spec.features.fp8 is not None,
        "attention": attention,
        "fp8": fp8.description,
        "optimizer": adamw,
        "compute": "bf16" if device.type == "cuda" else "fp32 (CPU smoke test)",
    }
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    overrides.add_arguments(ap, DEFAULT_VARIANTS, REFERENCE)
    ap.add_argument(
        "--peer",
        action="append",
        default=None,
        metavar="'LABEL: NAME=VALUE ...'",
        help="a variant on Hugging Face's model, repeatable ('none': none; default: "
        f"{' | '.join(map(repr, DEFAULT_PEERS))})",
    )
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seq", type=int, default=None, help="default 8192 (128 with --tiny)")
    ap.add_argument("--mbs", type=int, default=1)
    ap.add_argument(
        "--accum",
        type=int,
        default=1,
        help="micro-batches per optimizer step (default 1: the step after each, as the issue's peer; the "
        "trainer accumulates GBS / (MBS x data-parallel ranks), 4 for config_H200 on 4 GPUs)",
    )
    ap.add_argument("--layers", type=int, default=None, help="fewer blocks (the full width) to fit one GPU")
    ap.add_argument(
        "--tiny", action="store_true", help="a 2-layer toy model (smoke test; runs on CPU with gloo)"
    )
    ap.add_argument(
        "--profile", action="store_true", help="print rank 0's top GPU kernels (CPU: operators) per variant"
    )
    args = ap.parse_args()
    peer_texts = [] if args.peer == ["none"] else (args.peer or list(DEFAULT_PEERS))
    args.seq = args.seq or (128 if args.tiny else 8192)
    shape = shapes.tiny(PRESETS["8b"], 512, args.seq) if args.tiny else PRESETS["8b"]
    shape = shape.replace(max_seq_length=args.seq, num_layers=args.layers)
    try:  # every variant's config before anything runs: a bad one stops the call at once
        plan = overrides.from_args(args, peer_texts)
        start = overrides.base("llama31_8b", args.config, BENCH_VALUES)
        specs = {
            v.label: replace(overrides.build(LlamaPretrainConfig, start, v.overrides).run_spec(), shape=shape)
            for v in plan.runs
        }
    except overrides.OverrideError as err:
        raise SystemExit(f"bench_llama: {err}") from None
    reference = plan.reference.label if plan.reference else "none"
    gpu = torch.cuda.is_available() and not args.tiny
    procs = processes.start(gpu)
    device, rank, world = procs.device, procs.rank, procs.world
    mesh = parallel.build_mesh(device.type, world, 1)
    n = shape.num_params(include_embedding=False)
    formula = (
        f"model FLOPs per sequence = 6 x N x seq + 6 x seq^2 x hidden x layers, N = {n:.4g} parameters "
        f"without the input embedding; = {shape.flops_per_token(args.seq) * args.seq / 1e12:.2f} TFLOP "
        f"per {args.seq}-token sequence"
    )
    results = {
        "device": torch.cuda.get_device_name(device) if gpu else "cpu",
        "world_size": world,
        "torch": torch.__version__,
        "versions": versions(),
        "seq": args.seq,
        "mbs": args.mbs,
        "accum": args.accum,
        "model": "tiny" if args.tiny else "llama3.1-8b",
        "config": str(args.config) if args.config else None,
        "flops_formula": formula,
        "bf16_matmul_tflops": matmul_peak(device),
        "runs": {},
    }
    if rank == 0:
        print(f"{results['device']} x {world}, torch {torch.__version__}; {formula}", flush=True)
    for v in plan.runs:
        peer = v.label in plan.peers
        try:
            r = bench(v.label, specs[v.label], peer, shape, args, device, mesh)
        except torch.cuda.OutOfMemoryError as err:
            r = {"error": f"out of memory: {str(err)[:160]}"}
            gc.collect()
            torch.cuda.empty_cache()
        results["runs"][v.label] = {"model": "hf" if peer else "ours", "overrides": v.overrides, **r}
        gc.collect()  # the variant's model and optimizer are gone with bench()'s frame: release their memory
        if gpu:
            torch.cuda.empty_cache()
        if rank == 0:
            print(f"  {v.label}: {json.dumps(results['runs'][v.label])}", flush=True)
    parity.check_all(results["runs"], reference, parity.uniform_loss(shape.vocab_size))
    if rank == 0:
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], "bench_llama.json").write_text(json.dumps(results, indent=2) + "\n")
        print_table(results, plan, reference, formula, args)
    procs.end()
    return 0


def print_table(results: dict, plan: overrides.Plan, reference: str, formula: str, args) -> None:
    """The runs as a Markdown table: each variant's speed against the peer's at the same precision and the
    peer's without FP8 (where they ran), and its loss parity."""
    runs = results["runs"]
    print(
        f"\n{results['device']} x {results['world_size']}, seq {args.seq}, micro-batch {args.mbs}, "
        f"{args.accum} per optimizer step, FSDP2; {formula}; loss parity against {reference} (tolerance per "
        f"step: {parity.TOLERANCE})"
    )
    print(
        "| variant | model | overrides | ms/step | tokens/s/GPU | model TFLOP/s/GPU | peak GiB "
        "| vs peer same precision | vs peer without FP8 | loss parity |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    peers = [name for name in runs if name in plan.peers and "ms" in runs[name]]

    def ratio(r: dict, fp8: bool) -> str:
        found = [name for name in peers if runs[name].get("fp8_matmuls") == fp8]
        value = r["tokens_per_s_per_gpu"] / runs[found[0]]["tokens_per_s_per_gpu"] if found else None
        return parity.ratio_cell(value, r.get("parity"))

    for name, r in runs.items():
        said = " ".join(f"{k}={val}" for k, val in r["overrides"].items()) or "-"
        head = f"| {name} | {r['model']} | {said} "
        if "ms" not in r:
            print(f"{head}| {r.get('skipped') or r.get('error')} | | | | | | |")
            continue
        ours = name not in plan.peers
        print(
            f"{head}| {r['ms']:.1f} | {r['tokens_per_s_per_gpu']:.0f} | {r['model_tflops_per_gpu']:.1f} | "
            f"{r['peak_gib']:.1f} | {ratio(r, r['fp8_matmuls']) if ours else '-'} | "
            f"{ratio(r, False) if ours else '-'} | {parity.column(r.get('parity'))} |"
        )


if __name__ == "__main__":
    sys.exit(main())
