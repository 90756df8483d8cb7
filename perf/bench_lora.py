"""Llama 2 70B LoRA fine-tuning steps on one GPU: ours (the benchmark's own model build and step) against the
peer a user would pick, Hugging Face `LlamaForCausalLM` + `peft` LoRA, side by side in one process.

    python -m perf.bench_lora --layers 40 [--config configs/llama2_70b_lora/config_H200_1x8x1.sh]
        [--set 'ACTIVATION_CHECKPOINTING=1'] [--variant 'fp8: PRECISION=fp8 FP8_BACKEND=native' ...]
        [--peer 'peft: ACTIVATION_CHECKPOINTING=1' ...] [--reference 'LABEL: NAME=VALUE ...']
        [--steps 6] [--warmup 2] [--seq 8192]
    torchrun --nproc_per_node=4 -m perf.bench_lora --layers 80 --set 'ACTIVATION_CHECKPOINTING=1 ACL=24'
    python -m perf.bench_lora --tiny          # CPU smoke test (under torchrun --nproc_per_node=2: FSDP2)

A variant is the benchmark's config (`--config`, else its typed defaults; `perf/lib/overrides.py`) with its
own overrides in the config's names (PRECISION, FP8_BACKEND, FP8_WEIGHTS, FP8_MLP_ACTIVATIONS, FP8_FAST_ACCUM,
FP8_CASTS, FP8_DPA, COMPILE, ACTIVATION_CHECKPOINTING, ACL, AC_KEEP_ATTENTION, ATTENTION, LORA_KERNEL, ...).
The 70B width (hidden 8192, FFN 28672, 64 / 8 heads, vocabulary 32000), `--layers` blocks, random frozen
weights, micro-batch 1 of `--seq` tokens whose last two thirds are scored (the GovReport rows' shape), by
default a new row of the bundled Wikipedia excerpt each step (`--text`, `perf/lib/rows.py` LoraRows: the speed
does not depend on the ids, the loss parity does: on one row repeated, per-tensor FP8 memorises slower than
bf16, ours and torchao's alike, perf/RESULTS.md), at the learning rate `perf/lib/schedules.py` lora_lr gives
(`--lr-warmup`).
- ours: the benchmark's own run, its config's `run_spec` (bf16 frozen base, float32 adapters of rank 16,
  alpha 32, dropout 0.1 on the fused q|k|v and o projections) built by `training.llama.build.build_run`, and
  its step `training.llama.step.train_step` (loss, clip at 0.3, AdamW over the adapters); PRECISION=fp8 with
  FP8_BACKEND=native: our FP8 linears for the frozen base; FP8_BACKEND=torchao: torchao's float8 (dynamic
  tensorwise scaling: an independent FP8 implementation).
- peer (`--peer`): `peft.get_peft_model(LoraConfig(r=16, lora_alpha=32, lora_dropout=0.1,
  target_modules=[q_proj, k_proj, v_proj, o_proj]))` on the Hugging Face model in bf16 (SDPA attention), its
  float32 loss, torch's fused AdamW and clip_grad_norm_ at 0.3 (eager: what a peft user writes); of its
  variant's settings it takes ACTIVATION_CHECKPOINTING (Hugging Face's gradient checkpointing), and no FP8.
Under torchrun with more than one process both sides are sharded with FSDP2 over the ranks, each decoder block
then the root, frozen weights and adapters gathered in bf16, gradients reduced in float32: ours as the trainer
does (`parallel.apply_fsdp`), the peer as an FSDP2 user of peft writes it (`fully_shard` per
`LlamaDecoderLayer`, `MixedPrecisionPolicy(bf16, float32)`; its adapters are float32, peft's default). Each
rank trains its own row; tokens/s are per GPU. Ours also
reports, from one step of its own (`perf/lib/memory.py`, on GPUs and under torchrun):
`kept_after_forward_gib`, memory the forward leaves allocated for its backward; and, as the backward reaches
each block, the weights FSDP2 still holds all-gathered and all memory allocated (`backward_gathered_gib`,
`backward_allocated_gib`). `--profile N` prints each variant's top N GPU kernels per step.

Loss parity (`perf/lib/parity.py`): every variant's per-step losses (every step it ran, from the first)
against the reference variant's (`--reference`, run first: ours eager, PyTorch's SDPA and dropout), all from
the same initial weights (the peer's base gets ours:
`peers.init_hf_like_ours`; its adapters are peft's own, one per projection) and the same row. Dropout draws
other masks in the peer and in our Triton kernel than in the reference: part of what the tolerance allows. A
variant that fails prints "invalid" instead of its speed ratio.

Model FLOPs (printed with the results), LoRA accounting: the frozen base runs forward and input gradients but
no weight gradients, so per token 4 x N (N: parameters without the input embedding) + 6 x seq x hidden x
layers (causal attention, forward and backward) + 6 x the adapters' parameters
(`LlamaShape.lora_flops_per_token`); recomputation is not counted. Times are CUDA-event medians.
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

from perf.lib import overrides, parity, peers, processes, shapes
from perf.lib.memory import memory_line, memory_step
from perf.lib.rows import LoraRows
from perf.lib.schedules import lora_lr
from perf.lib.timing import matmul_peak, print_profile, step_record, take_peak, time_steps, versions
from training.llama.build import RunSpec, build_run
from training.llama.model import PRESETS
from training.llama.parallel import Parallelism
from training.llama.step import train_step
from training.llama2_70b_lora.config import LoraConfig

# what the bench sets of the settings it does not read (no data, a random base, its own batch)
BENCH_VALUES = {"DATADIR": "/nonexistent", "INIT_CHECKPOINT": "none", "MINIBS": "1", "MBS": "1"}
DEFAULT_VARIANTS = ("bf16:", "fp8: PRECISION=fp8 FP8_BACKEND=native")
DEFAULT_PEERS = ("peft:",)
REFERENCE = "reference: COMPILE=0 LORA_KERNEL=pytorch ATTENTION=sdpa"


def rank_of(mesh) -> int:
    return 0 if mesh is None else torch.distributed.get_rank()


def steps_run(args) -> int:
    """How many steps a variant runs: compile, memory, warm-up, timed, profiled (`bench`)."""
    return 2 + args.warmup + args.steps + (2 if args.profile else 0)


def bench_ours(spec: RunSpec, seq, device, args, mesh, world) -> tuple[callable, dict]:
    """The benchmark's own build and step (`build_run` of its config's run, the variant's settings)."""
    model, step, applied = build_run(spec, device, mesh, Parallelism(world, 1, 1, 1, world, 1))
    rows = LoraRows(spec.shape.vocab_size, seq, device, rank_of(mesh), world, args.text, steps_run(args))
    losses = []

    def run():
        loss, _ = train_step(step, [rows(len(losses))], lora_lr(len(losses), args.lr_warmup))
        losses.append(loss)

    adapters = sum(p.numel() for p in step.params)
    return run, {
        "adapters": adapters,
        "losses": losses,
        "fp8": applied.fp8.description,
        "model": model,
        "ac": applied.activation_checkpointing.description,
        "optimizer": applied.optimizer,
        "lora": applied.lora.description,
        "data_parallel": applied.data_parallel.description,
        "attention": applied.attention,
    }


def bench_peft(spec: RunSpec, seq, device, args, mesh, world) -> tuple[callable, dict]:
    """The peer: Hugging Face + peft as its user writes it (`peers.peft_lora`), torch's fused AdamW and clip
    at 0.3 (eager)."""
    shape, recompute = spec.shape, spec.features.activation_checkpointing
    model, sharded = peers.peft_lora(shape, device, mesh, recompute=recompute)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=4e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4, fused=device.type == "cuda"
    )
    step = peers.hf_step(model, optimizer, clip=0.3)
    rows = LoraRows(shape.vocab_size, seq, device, rank_of(mesh), world, args.text, steps_run(args))
    losses = []

    def run():
        losses.append(step([rows(len(losses))], lora_lr(len(losses), args.lr_warmup)))

    adapters = sum(p.numel() for p in params)  # (global counts: DTensors report the full shape)
    return run, {
        "adapters": adapters,
        "losses": losses,
        "fp8": "off",
        "data_parallel": sharded,
        "ac": "gradient checkpointing" if recompute else "off",
        "attention": "sdpa",
    }


def bench(label: str, spec: RunSpec, peer: bool, seq: int, args, device, mesh, world: int) -> dict:
    if spec.features.fp8 is not None and device.type != "cuda":
        return {"skipped": "FP8 needs a GPU"}
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    build = bench_peft if peer else bench_ours
    run, info = build(spec, seq, device, args, mesh, world)
    model = info.pop("model", None)
    if device.type == "cuda":
        info["built_gib"] = torch.cuda.memory_allocated() / 2**30
    t0 = time.perf_counter()
    run()  # compiles (and, native FP8, calibrates first: `training.fp8.calibrate`)
    first_s = time.perf_counter() - t0
    first_peak = take_peak(device)  # `peak_gib` is the later steps'
    if model is not None and (device.type == "cuda" or mesh is not None):  # the memory of one step
        info.update(memory_step(run, model, device))
    times = time_steps(run, args.warmup, args.steps, device)
    if args.profile:  # (every rank runs the profiled steps: they hold FSDP's collectives)
        print_profile(run, steps=2, top=args.profile, show=rank_of(mesh) == 0, title=f"{label}:")
    ms = statistics.median(times)
    tokens_per_s = seq / ms * 1e3
    flops = spec.shape.lora_flops_per_token(seq, info["adapters"])
    peak = take_peak(device)
    if mesh is not None:  # the slowest rank's time and the largest peaks
        both = torch.tensor([ms, peak, first_peak], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(both, torch.distributed.ReduceOp.MAX)
        ms, peak, first_peak = both.tolist()
        tokens_per_s = seq / ms * 1e3
    return {
        "ms": ms,
        "spread_ms": [min(times), max(times)],
        "tokens_per_s": tokens_per_s,
        "model_tflops": flops * tokens_per_s / 1e12,
        "fp8_matmuls": spec.features.fp8 is not None,
        **step_record(first_s, first_peak, peak, info.pop("losses")),
        **info,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    overrides.add_arguments(ap, DEFAULT_VARIANTS, REFERENCE, common="ACTIVATION_CHECKPOINTING=1")
    ap.add_argument(
        "--peer",
        action="append",
        default=None,
        metavar="'LABEL: NAME=VALUE ...'",
        help="a variant on Hugging Face's model with peft's LoRA, repeatable ('none': none; "
        f"default: {' | '.join(map(repr, DEFAULT_PEERS))})",
    )
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--seq", type=int, default=None, help="default 8192 (64 with --tiny)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile", type=int, default=0, help="print this many top GPU kernels per variant")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer toy model on the CPU (smoke test)")
    ap.add_argument(
        "--lr-warmup",
        type=int,
        default=5,
        help="learning-rate warm-up steps (`perf/lib/schedules.py` lora_lr)",
    )
    ap.add_argument(
        "--text",
        choices=("stream", "row", "random"),
        default="stream",
        help="the rows trained on (`perf/lib/rows.py` LoraRows): the excerpt's rows in order, "
        "one excerpt row every step, one random row every step",
    )
    args = ap.parse_args()
    seq = args.seq or (64 if args.tiny else 8192)
    shape = PRESETS["70b"].replace(num_layers=args.layers, max_seq_length=seq)
    if args.tiny:
        shape = shapes.tiny(PRESETS["70b"], 512, seq)
    try:  # every variant's config before anything runs: a bad one stops the call at once
        plan = overrides.from_args(args, [] if args.peer == ["none"] else (args.peer or list(DEFAULT_PEERS)))
        start = overrides.base("llama2_70b_lora", args.config, BENCH_VALUES)
        specs = {
            v.label: replace(overrides.build(LoraConfig, start, v.overrides).run_spec(), shape=shape)
            for v in plan.runs
        }
    except overrides.OverrideError as err:
        raise SystemExit(f"bench_lora: {err}") from None
    if fp8_peers := [label for label in plan.peers if specs[label].features.fp8 is not None]:
        raise SystemExit(f"bench_lora: peer variant(s) {', '.join(fp8_peers)} ask for FP8; the peer has none")
    reference = plan.reference.label if plan.reference else "none"
    gpu = torch.cuda.is_available() and not args.tiny
    procs = processes.start(gpu, group=False)
    device, world, mesh, main_rank = procs.device, procs.world, procs.mesh(), procs.main
    formula = "4 x N x tokens + 6 x seq x hidden x layers x tokens + 6 x adapters x tokens"
    results = {
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "versions": versions(),
        "seq": seq,
        "layers": shape.num_layers,
        "gpus": world if gpu else 0,
        "text": args.text,
        "config": str(args.config) if args.config else None,
        "bf16_matmul_tflops": matmul_peak(device),
        "runs": {},
        "flops_formula": formula,
    }
    say = procs.say
    say(
        f"{results['device']} x {world}, torch {torch.__version__}, {shape.num_layers} layers of the 70B "
        f"width, seq {seq}",
        flush=True,
    )
    for v in plan.runs:
        peer = v.label in plan.peers
        try:
            r = bench(v.label, specs[v.label], peer, seq, args, device, mesh, world)
        except torch.cuda.OutOfMemoryError as err:
            r = {"error": f"out of memory: {str(err)[:600]}"}
        results["runs"][v.label] = r = {"model": "peft" if peer else "ours", "overrides": v.overrides, **r}
        say(f"  {v.label}: {json.dumps(r)}", flush=True)
        gc.collect()
        if gpu:
            torch.cuda.empty_cache()
    procs.end()
    if not main_rank:
        return 0
    parity.check_all(results["runs"], reference, parity.uniform_loss(shape.vocab_size))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "bench_lora.json").write_text(json.dumps(results, indent=2) + "\n")
    peer = next((r for n, r in results["runs"].items() if n in plan.peers and "ms" in r), None)
    print(
        f"\n{results['device']} x {world}: Llama 2 70B width, {shape.num_layers} layers, seq {seq}, "
        f"micro-batch 1 per GPU, LoRA rank 16; model FLOPs {results['flops_formula']}; loss parity "
        f"against {reference} (tolerance per step: {parity.TOLERANCE})"
    )
    print(
        "| variant | model | overrides | s/step | tokens/s per GPU | model TFLOP/s per GPU | peak GiB "
        "| vs peer | loss parity |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results["runs"].items():
        said = " ".join(f"{k}={val}" for k, val in r["overrides"].items()) or "-"
        head = f"| {name} | {r['model']} | {said} "
        if "ms" not in r:
            print(f"{head}| {r.get('skipped') or r.get('error')} | | | | | |")
            continue
        check = r.get("parity")
        ratio = parity.ratio_cell(r["tokens_per_s"] / peer["tokens_per_s"] if peer else None, check)
        print(
            f"{head}| {r['ms'] / 1e3:.3f} | {r['tokens_per_s']:.0f} | {r['model_tflops']:.1f} | "
            f"{r['peak_gib']:.1f} | {ratio} | {parity.column(check)} |"
        )
    for name, r in results["runs"].items():
        if line := memory_line(r):
            print(f"memory, {name}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
