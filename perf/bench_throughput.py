"""The throughput suite's step against torchtitan's, side by side in one launch: same model, sequence, batch
and precision.

    torchrun --nproc_per_node=1 -m perf.bench_throughput [--rows llama8b-bf16,llama8b-fp8,mistral-bf16]
        [--variant 'ours:' --variant 'torchao: --fp8_backend torchao' ...] [--peer reference --peer titan]
        [--layers 16] [--seq 8192] [--mbs 1] [--steps 8] [--warmup 3] [--no-compile] [--profile 30]
    torchrun --nproc_per_node=2 -m perf.bench_throughput --tiny      # CPU (gloo) smoke test of this script

Ours: the suite's own workload (`training.throughput.llm.build`, what `train_fsdp.py` runs: the Llama step,
features and FP8 backend choice), one iteration per optimizer step. A variant of ours (`--variant`,
repeatable, `;` between several in one argument; default `ours:`) is the row's run with the suite's own flags
on top, as `train_fsdp.py` takes them: 'LABEL: --flag value ...', e.g. 'torchao: --fp8_backend torchao'
(torchtitan's FP8 backend), 'flash4: --attention flash4', 'autocast: --bf16_weights False' (one GPU, BF16:
autocast casting the weights each step, as torchtitan's one-GPU step). The suite's parser reads the flags; the
bench sets --batch_size (`--mbs`), --grad_accum 1, --seq_len and --num_layers itself. Each row records its
flags, the words to add to a `train_fsdp.py` command. A variant that asks for an FP8 backend on a BF16 row is
skipped.

The peers (`--peer`, repeatable; default both; `none`: neither): `titan`, torchtitan 0.2.2 (the release for
torch 2.11; 0.3.0 needs a newer torch), driven as its trainer drives itself: its Llama 3 `Transformer` built
on the meta device from `TransformerModelArgs` of the same shape, its float8 converter (torchao tensorwise,
the output layer left in bf16 as ours) for FP8 rows, `parallelize_llama` (per-block compile, FSDP2 over the
ranks; autocast on one GPU), its fused AdamW, clip 1.0 and compiled cross-entropy, on the same random tokens.
Mistral rows give torchtitan its FlexAttention with its own sliding-window mask (4096, as ours); Llama rows
its SDPA. And `reference`: our step with the flags of `REFERENCE` (bf16 also for an FP8 row, eager, PyTorch's
SDPA, autocast, every block recomputed in the backward: the same numbers; without recomputation the eager
step runs out of memory at full depth on 4 x H100), run first for each row. Rows that need more GPUs than
there are run `--layers` blocks at full width (the table says so).

Loss parity (`perf/lib/parity.py`): every variant of ours records its per-step losses (every step, from the
first) on the same initial weights (one seed) and the same batches as the row's reference (an FP8 row's is the
bf16 row's where that ran), and is checked against it. Ours and the reference train on `perf/bench_llama`'s
batches and learning rates (`perf/lib/rows.py` llama_batches, `perf/lib/schedules.py` llama_lr: rows of the
bundled Wikipedia excerpt, 3e-5 after 10 warm-up steps, `--lr-warmup` to change), not on the suite's pool of
random rows at its constant 1e-3: there the 8B memorised its one batch (12.6 to 0.001 in three steps on one
H200 at 24 blocks) or, on 4 ranks, jumped about (12.6, 10.6, 12.4), and two runs of the same eager reference
parted by 4%: per-step parity measured nothing. torchtitan draws its own weights (its init, its RoPE layout)
and tokens (the suite's kind: random, one batch): its losses are recorded, checked only for a degenerate
start.

A step is forward + backward + clip + AdamW; times are CUDA-event medians on rank 0 after warm-up. TFLOP/s per
GPU in both accountings of `training/throughput/flops.py` (ours and AMD's), for both peers from the same
shape. Prints a table last; writes $OUT/bench_throughput.json after each variant when OUT is set.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import shlex
import statistics
import sys
import time
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from perf.lib import overrides, parity, processes, shapes
from perf.lib.rows import llama_batches
from perf.lib.schedules import llama_lr
from perf.lib.timing import print_profile, step_record, take_peak, time_steps
from training.common.backends import importable
from training.common.config import ConfigError
from training.llama.model import LlamaShape
from training.throughput import flops, llm
from training.throughput.config import ModelSpec, RunArgs, load_model, parse_args

ROOT = Path(__file__).resolve().parents[1]
PEERS = ("reference", "titan")  # in the order they run: the reference first, torchtitan after ours
ROWS = {  # row -> (config, MODEL_TYPE, FP8)
    "llama8b-bf16": ("llama-3.1-8b-8k.json", "llama", False),
    "llama8b-fp8": ("llama-3.1-8b-8k.json", "llama", True),
    "mistral-bf16": ("mistral-7b-v0.1.json", "mistral", False),
    "mistral-fp8": ("mistral-7b-v0.1.json", "mistral", True),
    "llama70b-bf16": ("llama-3.1-70b.json", "llama", False),
}


def shape_of(row: str, args) -> LlamaShape:
    config, model_type, _ = ROWS[row]
    shape = load_model(ROOT / "configs" / "throughput" / config, model_type).shape
    if args.tiny:
        shape = shapes.tiny(shape, 512, args.seq)
    return shape.replace(max_seq_length=args.seq, num_layers=args.layers)


# the flags the bench sets itself (`--mbs`, one iteration a step, `--seq`, `--layers`)
BENCH_FLAGS = ("batch_size", "grad_accum", "grad_accumlate_pre_steps", "seq_len", "num_layers")
# the reference peer: our step in bf16, eager, PyTorch's SDPA, autocast's casts, every block recomputed
REFERENCE = (
    "--enable_fp8 False --enable_compile False --attention sdpa --bf16_weights False "
    "--activation_checkpointing True"
)


@dataclass(frozen=True)
class Variant:
    """A run of ours: `label` names it in the results, `flags` are `train_fsdp.py`'s, as written."""

    label: str
    flags: tuple[str, ...]


def variants(texts: list[str]) -> list[Variant]:
    """The variants of `texts` ('LABEL: --flag value ...', `;` between several, as `perf/lib/overrides.py`
    reads them), each flag read by the suite's parser; a flag the bench sets, or a label given twice, is an
    error."""
    out = []
    try:
        for text in overrides.each(texts):
            label, words = overrides.split(text)
            if words and not words[0].startswith("--"):
                raise ConfigError(f"variant {text!r}: expected train_fsdp.py flags (--name value ...)")
            names = [w[2:].partition("=")[0].replace("-", "_") for w in words if w.startswith("--")]
            if taken := [f"--{n}" for n in names if n in BENCH_FLAGS]:
                raise ConfigError(
                    f"variant {text!r}: {', '.join(taken)} is set by the bench (--mbs, --seq, --layers)"
                )
            try:  # the suite's parser: a bad flag or value, named
                parse_args(["model.json", "llama", *words])
            except ConfigError as err:
                raise ConfigError(f"variant {text!r}: {err}") from None
            out.append(Variant(label or " ".join(words) or "ours", tuple(words)))
        overrides.check_labels([v.label for v in out], PEERS)
    except overrides.OverrideError as err:
        raise ConfigError(str(err)) from None
    return out


def run_args(row: str, variant: Variant, args) -> RunArgs:
    """The suite's flags for `variant` of `row`: the row's, the bench's, then the variant's own."""
    config, model_type, fp8 = ROWS[row]
    bench = ["--batch_size", str(args.mbs), "--grad_accum", "1", "--enable_fp8", str(fp8)]
    bench += ["--enable_compile", str(args.compile)]
    return parse_args([config, model_type, *bench, *variant.flags])


def ours_step(run: RunArgs, row: str, shape: LlamaShape, args, device, mesh, world: int):
    spec = ModelSpec(row, run.model_type, run.config_file, shape=shape)
    workload = llm.build(spec, run, device, mesh, world)
    lr_at = functools.partial(llama_lr, warmup=args.lr_warmup)
    rows = llama_batches(32, args.mbs, args.seq, shape.vocab_size, device, dist.get_rank())
    return workload.make_step(args.mbs, 1, lr_at, rows), workload.backends


def import_torchtitan():
    """torchtitan's modules for the bench. Its Llama 3 model module imports the train spec, which imports its
    text dataloader, which imports Hugging Face `datasets`: not on the GPU machine, and never used here (no
    data is read), so a placeholder module stands in for it where it is not installed."""
    if not importable("datasets"):
        placeholder, split = types.ModuleType("datasets"), types.ModuleType("datasets.distributed")
        placeholder.Dataset = placeholder.load_dataset = split.split_dataset_by_node = None
        placeholder.distributed = split
        sys.modules.update({"datasets": placeholder, "datasets.distributed": split})
    import torchtitan

    return torchtitan


def titan_step(row: str, shape: LlamaShape, args, device, world: int):
    """torchtitan's model, float8 converter, parallelize, optimizer, loss and clip, as its trainer uses
    them."""
    torchtitan = import_torchtitan()
    from torch.nn.attention.flex_attention import and_masks
    from torchtitan.components.loss import build_cross_entropy_loss
    from torchtitan.components.optimizer import build_optimizers
    from torchtitan.config import JobConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import parallel_dims as titan_dims
    from torchtitan.distributed import utils as titan_dist
    from torchtitan.models.attention import (
        create_attention_mask,
        get_causal_mask_mod,
        get_sliding_window_mask_mod,
    )
    from torchtitan.models.llama3.infra.parallelize import parallelize_llama
    from torchtitan.models.llama3.model.args import TransformerModelArgs
    from torchtitan.models.llama3.model.model import Transformer
    from torchtitan.protocols.model_converter import build_model_converters

    fp8 = ROWS[row][2]
    if device.type == "cpu":  # torchtitan builds its meshes on "cuda" when no accelerator is found
        titan_dims.device_type = "cpu"
    job = JobConfig()
    job.training.seq_len, job.training.local_batch_size = shape.max_seq_length, args.mbs
    job.training.mixed_precision_param = "bfloat16" if device.type == "cuda" else "float32"
    job.training.mixed_precision_reduce = "float32"
    job.compile.enable, job.compile.components = args.compile, ["model", "loss"]
    job.activation_checkpoint.mode = "none"
    if fp8:
        job.model.converters = ["quantize.linear.float8"]
        f8 = job.quantize.linear.float8
        f8.enable_fsdp_float8_all_gather = f8.precompute_float8_dynamic_scale_for_fsdp = True
        f8.filter_fqns = ["output"]  # the output layer in bf16, as ours
    dims = ParallelDims(dp_replicate=1, dp_shard=world, cp=1, tp=1, pp=1, ep=1, etp=1, world_size=world)
    if int(8 * shape.hidden_size / 3) > shape.ffn_hidden_size:
        raise ValueError(
            f"torchtitan's FFN sizing gives no {shape.ffn_hidden_size} at width {shape.hidden_size}"
        )
    window = shape.sliding_window
    window = window if window and window < shape.max_seq_length else None
    # its FFN width: multiple_of x ceil(8 x dim / 3 / multiple_of), which is ours with multiple_of = ours
    model_args = TransformerModelArgs(
        dim=shape.hidden_size,
        n_layers=shape.num_layers,
        n_heads=shape.num_heads,
        n_kv_heads=shape.num_kv_heads,
        vocab_size=shape.vocab_size,
        multiple_of=shape.ffn_hidden_size,
        ffn_dim_multiplier=None,
        norm_eps=shape.norm_eps,
        rope_theta=shape.rope_theta,
        max_seq_len=shape.max_seq_length,
        attn_type="flex" if window else "sdpa",
    )
    with torch.device("meta"):
        model = Transformer(model_args)
    converters = build_model_converters(job, dims)
    converters.convert(model)
    parallelize_llama(model, dims, job)
    if device.type == "cpu":  # gloo has no PREMUL_SUM, which FSDP2 uses for torchtitan's divide factor 1.0
        for module in model.modules():
            if hasattr(module, "set_force_sum_reduction_for_comms"):
                module.set_force_sum_reduction_for_comms(True)
    model.to_empty(device=device)
    with torch.no_grad():
        model.init_weights()
    model.train()
    optimizers = build_optimizers([model], job.optimizer, dims)
    loss_fn = build_cross_entropy_loss(job)
    amp = titan_dist.maybe_enable_amp(dims, job.training.mixed_precision_param, device.type)
    masks = None
    if window:  # torchtitan's own mask helpers: causal and at most `window` tokens (itself included)
        mask = and_masks(get_causal_mask_mod(), get_sliding_window_mask_mod(window))
        masks = create_attention_mask(mask, 1, None, shape.max_seq_length, shape.max_seq_length)
    tokens = torch.randint(0, shape.vocab_size, (args.mbs, shape.max_seq_length + 1), device=device)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]

    def step():
        """torchtitan's `Trainer.train_step` without data loading, logging and checkpoints: the loss summed
        over tokens and divided by the tokens of all ranks (FSDP's own division is off in its parallelize)."""
        optimizers.zero_grad()
        tokens = torch.tensor(labels.numel(), dtype=torch.int64, device=device)
        if dims.dp_enabled:
            tokens = titan_dist.dist_sum(tokens, dims.get_mesh("batch"))
        with amp:
            loss = loss_fn(model(inputs, attention_masks=masks), labels) / tokens
        loss.backward()
        titan_dist.clip_grad_norm_(list(model.parameters()), job.training.max_norm, foreach=True)
        optimizers.step()
        converters.post_optimizer_hook(model)
        return loss.detach() * world

    fp8_note = (
        f"torchao float8 tensorwise via torchtitan's converter{', FP8 all-gather' if world > 1 else ''}"
    )
    backends = {
        "torchtitan": getattr(torchtitan, "__version__", "?"),
        "attention": f"flex, sliding window {window}" if window else "sdpa",
        "fp8": fp8_note if fp8 else "off",
        "data_parallel": f"FSDP2 over {world} ranks" if world > 1 else "off (autocast bf16)",
    }
    return step, backends


def bench(row: str, variant: Variant | str, args, device, mesh, world: int) -> dict:
    """One row's run of `variant` (ours) or of the peer named `variant` ("titan")."""
    shape = shape_of(row, args)
    torch.manual_seed(0)
    if variant == "titan":
        if ROWS[row][2] and device.type != "cuda":
            return {"skipped": "FP8 needs a GPU"}
        if not importable("torchtitan"):
            return {"skipped": "torchtitan not importable"}
        if shape.sliding_window and device.type == "cpu":
            return {"skipped": "torchtitan's window is FlexAttention, which has no backward on the CPU"}
        train, backends = titan_step(row, shape, args, device, world)
    else:
        run = run_args(row, variant, args)
        if run.enable_fp8 and device.type != "cuda":
            return {"skipped": "FP8 needs a GPU"}
        if not run.enable_fp8 and run.fp8_backend != "auto":
            return {"skipped": f"--fp8_backend {run.fp8_backend}: an FP8 variant, and the row runs no FP8"}
        train, backends = ours_step(run, row, shape, args, device, mesh, world)
    losses = []

    def step():
        losses.append(train())

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    step()  # the first step compiles (native FP8 calibrates first)
    first_s = time.perf_counter() - t0
    first_peak = take_peak(device)  # `peak_gib` is the later steps'
    times = time_steps(step, args.warmup, args.steps, device)
    step()
    if args.profile:
        print_profile(step, steps=2, top=args.profile, show=dist.get_rank() == 0, title=f"{row}:{variant}:")
    peaks = torch.tensor([first_peak, take_peak(device)], device=device)
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
    first_peak, peak = peaks.tolist()
    ms = statistics.median(times)
    tokens = args.mbs * shape.max_seq_length / ms * 1e3
    seq = shape.max_seq_length
    return {
        "ms": ms,
        "spread_ms": [min(times), max(times)],
        "tokens_per_s_per_gpu": tokens,
        "tflops_per_gpu": {
            k: tokens * count(shape, seq) / 1e12 for k, count in (("ours", flops.ours), ("amd", flops.amd))
        },
        **step_record(first_s, first_peak, peak, losses),
        "layers": shape.num_layers,
        "backends": backends,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="llama8b-bf16,llama8b-fp8,mistral-bf16", help=", ".join(ROWS))
    ap.add_argument(
        "--variant",
        dest="variants",
        action="append",
        default=None,
        metavar="'LABEL: --flag value ...'",
        help="a run of ours with train_fsdp.py's flags on top, repeatable (default: 'ours:')",
    )
    ap.add_argument(
        "--peer",
        dest="peers",
        action="append",
        default=None,
        choices=[*PEERS, "none"],
        help=f"{', '.join(PEERS)} (repeatable; default both; none: neither)",
    )
    ap.add_argument("--layers", type=int, default=None, help="fewer blocks at full width, to fit fewer GPUs")
    ap.add_argument("--seq", type=int, default=None, help="default 8192 (64 with --tiny)")
    ap.add_argument("--mbs", type=int, default=1, help="sequences per GPU per step")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--lr-warmup",
        type=int,
        default=10,
        help="the learning rate's warm-up steps to 3e-5 (more: a gentler start; references spike less)",
    )
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--profile", type=int, default=0, help="print this many top GPU kernels per variant")
    ap.add_argument("--tiny", action="store_true", help="2-layer models of each row's family, CPU and gloo")
    args = ap.parse_args()
    try:  # every variant's flags before anything runs: a bad one stops the call at once
        ours = variants(args.variants or ["ours:"])
    except ConfigError as err:
        ap.error(str(err))
    peers = [p for p in PEERS if p in (args.peers or PEERS)]
    if args.peers and "none" in args.peers and len(args.peers) > 1:
        ap.error("--peer none: no other --peer with it")
    reference = [Variant("reference", tuple(shlex.split(REFERENCE)))] if "reference" in peers else []
    runs = [*reference, *ours, *(["titan"] if "titan" in peers else [])]
    gpu = torch.cuda.is_available() and not args.tiny
    procs = processes.start(gpu)
    device, rank, world = procs.device, procs.rank, procs.world
    args.seq = args.seq or (64 if args.tiny else 8192)
    mesh = procs.mesh()
    results = {
        "device": torch.cuda.get_device_name(device) if gpu else "cpu",
        "world_size": world,
        "torch": torch.__version__,
        "seq": args.seq,
        "mbs": args.mbs,
        "layers": args.layers,
        "lr_warmup": args.lr_warmup,
        "runs": {},
    }
    say = print if rank == 0 else (lambda *a, **k: None)
    say(
        f"{results['device']} x {world}, torch {torch.__version__}, seq {args.seq}, batch {args.mbs} per GPU",
        flush=True,
    )
    for row in args.rows.split(","):
        for variant in runs:
            label = variant if isinstance(variant, str) else variant.label
            name = f"{row}:{label}"
            try:
                r = bench(row, variant, args, device, mesh, world)
            except torch.cuda.OutOfMemoryError as err:
                r = {"error": f"out of memory: {str(err)[:160]}"}
            except Exception as err:  # noqa: BLE001 - one peer failing (an import, say) leaves the others' rows
                traceback.print_exc()
                r = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
            if not isinstance(variant, str):
                r = {"flags": " ".join(variant.flags), **r}
            results["runs"][name] = r
            gc.collect()  # the variant's model and optimizer go with bench()'s frame
            if gpu:
                torch.cuda.empty_cache()
            torch._dynamo.reset()  # each variant compiles its own blocks
            say(f"  {name}: {json.dumps(r)}", flush=True)
            if rank == 0 and os.environ.get("OUT"):  # after each variant: a call cut short keeps what ran
                Path(os.environ["OUT"], "bench_throughput.json").write_text(
                    json.dumps(results, indent=2) + "\n"
                )
    check_parity(results["runs"], args)
    if rank == 0 and os.environ.get("OUT"):
        Path(os.environ["OUT"], "bench_throughput.json").write_text(json.dumps(results, indent=2) + "\n")
    say(table(results))
    procs.end()
    return 0


def check_parity(runs: dict[str, dict], args) -> None:
    """Each row's variants against its reference (an FP8 row's: its own, else the bf16 row's). Where both
    rows of a model ran their references (the same step in bf16 on the same weights and batches), each is
    the other's twin: only the steps the two repeat are compared (`parity.verdict`)."""
    for row in args.rows.split(","):
        reference = runs.get(f"{row}:reference", {})
        if "losses" not in reference:
            reference = runs.get(f"{row.replace('fp8', 'bf16')}:reference", {})
        other = row.replace("fp8", "bf16") if "fp8" in row else row.replace("bf16", "fp8")
        twin = runs.get(f"{other}:reference", {}).get("losses") if other != row else None
        # full names: an FP8 row's variants take FP8's tolerance (`parity.kind_of`)
        group = {name: r for name, r in runs.items() if name.partition(":")[0] == row}
        group.setdefault(f"{row}:reference", reference)
        vocab = shape_of(row, args).vocab_size
        skip = {f"{row}:titan": "torchtitan draws its own weights (its init and RoPE layout) and tokens"}
        parity.check_all(group, f"{row}:reference", parity.uniform_loss(vocab), skip, twin)


def table(results: dict) -> str:
    lines = [
        f"\n{results['device']} x {results['world_size']}, seq {results['seq']}, batch {results['mbs']} "
        "per GPU" + (f", {results['layers']} blocks (reduced depth)" if results["layers"] else ""),
        "| row | variant | flags | ms/step | tokens/s/GPU | TFLOP/s/GPU (ours) | TFLOP/s/GPU (AMD's count) "
        "| peak GiB | ours / torchtitan | loss parity |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results["runs"].items():
        row, _, peer = name.partition(":")
        flags = f"`{r['flags']}`" if r.get("flags") else "-"
        if "ms" not in r:
            lines.append(f"| {row} | {peer} | {flags} | {r.get('skipped') or r.get('error')} | | | | | | |")
            continue
        titan = results["runs"].get(f"{row}:titan", {})
        ratio, check = None, r.get("parity")
        if peer != "titan" and "ms" in titan:
            ratio = r["tokens_per_s_per_gpu"] / titan["tokens_per_s_per_gpu"]
        t = r["tflops_per_gpu"]
        lines.append(
            f"| {row} | {peer} | {flags} | {r['ms']:.1f} | {r['tokens_per_s_per_gpu']:,.0f} "
            f"| {flops.fmt(t['ours'])} | {flops.fmt(t['amd'])} | {r['peak_gib']:.1f} "
            f"| {parity.ratio_cell(ratio, check)} | {parity.column(check)} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
