"""Curve parity with trusted references: our model and step against a trusted implementation from
the same initial weights on the same batches of real text, dropout off, for `--steps` optimizer steps (50 by
default), in bf16 and in every FP8 backend we ship; a table, $OUT/curve_parity.json and a plot.

    python -m perf.curve_parity [lora] [llama] [bert] [--steps 50]      # one GPU
    python -m perf.curve_parity lora --layers 40 --set ACTIVATION_CHECKPOINTING=1 --mlperf-regime
        # deeper, recomputed, MLPerf's regime
    python -m perf.curve_parity lora --layers 20 --set ACTIVATION_CHECKPOINTING=1 --mlperf-regime \
        --lora-warmup 5 --lora-variant 'compiled: COMPILE=1' --lora-variant 'fp8: PRECISION=fp8'
        # a bf16 control beside FP8, warmed up
    python -m perf.curve_parity --tiny                                   # CPU smoke test (toy shapes)
    torchrun --nproc_per_node=2 -m perf.curve_parity lora --layers 80 --set ACTIVATION_CHECKPOINTING=1 \
        --mlperf-regime --lora-warmup 5
        # all 80 blocks: every variant sharded by FSDP2 over the GPUs, each training the same row

A variant of ours is its benchmark's config (the typed defaults) with overrides in the config's names
(`perf/lib/overrides.py`: 'LABEL: NAME=VALUE ...'), built by the trainer's `build_run`; blocks compile on GPUs
only (on the CPU every variant runs COMPILE=0).

- lora: Llama 2 70B's width, `--layers` blocks (4), one 8192-token row of the Wikipedia excerpt a step, its
  first third unscored (the GovReport rows' shape); the reference is Hugging Face `LlamaForCausalLM` + `peft`
  (r 16, alpha 32, on q, k, v, o) with the three q/k/v adapters sharing one A, which is exactly our fused
  q|k|v adapter (one A, B's rows split), given our base weights and A; AdamW (torch) over the adapters, clip
  0.3, lr 4e-4 (5 warm-up steps, cosine). Ours: eager with PyTorch kernels (ATTENTION=sdpa ADAMW_IMPL=torch
  LORA_KERNEL=pytorch), the trainer's defaults (its attention, AdamW and dropout kernel; blocks not compiled,
  as the GPU configs run), native FP8 (PRECISION=fp8 FP8_BACKEND=native), native FP8 with the frozen base
  stored in FP8 (FP8_WEIGHTS=1); `--lora-variant` chooses others. Under torchrun (`--mlperf-regime` only: the
  reference is ours in bf16) every variant is sharded by FSDP2 over the processes, as the trainer shards it,
  and every process trains the same row: one GPU's curve, of a model one GPU cannot hold (80 blocks in bf16).
- llama: Llama 3.1 8B's width, `--layers` blocks, 4 rows of 2048 tokens a step; the reference is Hugging Face
  `LlamaForCausalLM` given our initial weights (float32 masters, bf16 autocast); AdamW (torch) with
  betas (0.9, 0.95), weight decay 0.1 on matrices, clip 1.0, 10 warm-up steps to 3e-5 then cosine.
  Ours: eager (ATTENTION=sdpa ADAMW_IMPL=torch), compiled (COMPILE=1, the trainer's AdamW), native FP8,
  torchao's float8 (on GPUs);
  `--llama-variant` chooses others.
- bert: BERT-Large, 32 rows of 128 tokens a step ([CLS] A [SEP] B [SEP], B the next text half the time, 15%
  of the tokens masked); the reference is Hugging Face `BertForPreTraining` with BERT's LAMB (its config's
  defaults: weight decay 0.01, not on biases and norms, clip 1.0), lr 1e-3 after 5 warm-up steps. Ours is
  BERT's config built by its `build_run` (`BertConfig.run_spec`), started from the reference's weights as the
  trainer starts from a checkpoint (INIT_CHECKPOINT): eager with PyTorch's SDPA (COMPILE=0 ATTENTION=sdpa
  PRECISION=bf16), compiled (COMPILE=1, the trainer's attention and compiled LAMB update), native FP8;
  `--bert-variant` chooses others.

Verdict per variant: the benches' one verdict and tolerance table (`perf/lib/parity.py`), over all steps for
bf16 variants, after the first `FP8_WARMUP` steps for FP8 ones (their delayed scaling learns its scales),
beside a bf16 control run where one ran (`--lora-control`: at each step a variant may part from the
reference by the tolerance plus the control's own distance, so a chaotic stretch of random weights is neither
a failure nor a hiding place). With `--mlperf-regime` the fixed tolerance gives way to measured noise:
`--lora-seeds` runs (1 by default) of the reference's own model, the same weights and batches with other
dropout masks (`<reference>-seedN`), and at each step a variant may part from the reference by as much as
those do there (`perf/lib/parity.py`'s `noise_band`): a lever that changes what the model learns parts
farther than another draw of the masks, a chaotic step parts them all. The
table shows the largest relative difference of its per-step loss from the reference's and the mean over the
last 10 steps. Model FLOPs are not counted: this is about numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from perf.lib import overrides, parity, peers, processes, shapes
from perf.lib.bert_rows import text_rows
from perf.lib.rows import LoraRows, excerpt
from perf.lib.schedules import LLAMA_LR, LORA_LR, lr_at
from perf.lib.timing import versions
from training.llama.build import build_run
from training.llama.model import PRESETS
from training.llama.parallel import Parallelism
from training.llama.step import train_step
from training.llama2_70b_lora.config import LoraConfig
from training.llama31_8b.config import LlamaPretrainConfig

FP8_WARMUP = 5  # FP8 curves are compared from this step: the first steps of delayed scaling learn its scales
DROPOUT_SEEDS = 1000  # `seedN` draws its dropout masks from PyTorch's generator seeded DROPOUT_SEEDS + N


def data_parallel(world: int) -> Parallelism:
    return Parallelism(world, 1, 1, 1, world, 1)


# ---- Llama 2 70B LoRA ----


# what the curves set of the benchmarks' settings they do not read (no data, a random base, their own batch)
LORA_VALUES = {"DATADIR": "/nonexistent", "INIT_CHECKPOINT": "none", "MINIBS": "1"}
LLAMA_VALUES = {"DATADIR": "/nonexistent", "GBS": "1", "MBS": "1", "MAX_LR": "3e-4", "WARMUP_STEPS": "0"}


def build_ours(cls, bench_values: dict, asked: dict[str, str], shape, device, mesh=None, world=1):
    """(model, the trainer's step) of `cls`'s config with `asked` over `bench_values`, at `shape`; blocks
    compile on GPUs only."""
    if device.type != "cuda":
        asked = {**asked, "COMPILE": "0"}
    try:
        spec = overrides.build(cls, overrides.base(cls.BENCHMARK.name, None, bench_values), asked).run_spec()
    except overrides.OverrideError as err:
        raise SystemExit(f"curve_parity: {err}") from None
    model, step, _ = build_run(replace(spec, shape=shape), device, mesh, data_parallel(world))
    return model, step


def lora_ours(
    shape, asked: dict[str, str], device, dropout: float = 0.0, warmup: int = 5, mesh=None, world=1
):
    """(model, one-step function) of the trainer's build and step at `shape`, sharded over `mesh`'s `world`
    processes (FSDP2) where given."""
    values = {**LORA_VALUES, "LORA_DROPOUT": str(dropout)}
    model, step = build_ours(LoraConfig, values, asked, shape, device, mesh, world)
    return model, lambda i, batch, steps: train_step(step, [batch], lr_at(i, LORA_LR, steps, warmup))[0]


def lora_peer(shape, ours, device, recompute: bool = False, warmup: int = 5):
    """Hugging Face + peft with the q/k/v adapters sharing one A (`peers.peft_fused_like`), AdamW (torch) over
    the adapters, clip 0.3, bf16 autocast."""
    model = peers.peft_fused_like(ours, shape, device, recompute)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=LORA_LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4, fused=device.type == "cuda"
    )
    step = peers.hf_step(model, optimizer, clip=0.3, autocast=torch.autocast(device.type, torch.bfloat16))
    return lambda i, batch, steps: step([batch], lr_at(i, LORA_LR, steps, warmup))


EAGER = "ATTENTION=sdpa ADAMW_IMPL=torch"  # PyTorch's kernels (and LORA_KERNEL=pytorch for LoRA)
NATIVE = "PRECISION=fp8 FP8_BACKEND=native"


def part_lora(args, device) -> dict:
    shape = PRESETS["70b"].replace(num_layers=args.layers, max_seq_length=args.seq)
    if args.tiny:
        shape = shapes.tiny(PRESETS["70b"], 32000, args.seq)
    rows = LoraRows(shape.vocab_size, args.seq, device, 0, 1, "stream", ahead=args.steps)
    batches = [rows(i) for i in range(args.steps)]  # the rows `bench_lora` trains on by default
    curves = {}
    eager = f"bf16-eager: {EAGER} LORA_KERNEL=pytorch"
    if args.mlperf_regime:  # dropout 0.1 and no warm-up, as MLPerf's recipe: ours in bf16 is the reference
        # (peft draws its own masks; ours draw the same ones in bf16 and FP8: one kernel, one seed a call)
        reference, dropout, warmup = overrides.variant("bf16:"), 0.1, 0
        texts = [f"fp8: {NATIVE}", f"fp8w: {NATIVE} FP8_WEIGHTS=1"]
    else:
        reference, dropout, warmup = None, 0.0, 5  # the peer, peft in bf16
        texts = [eager, "bf16:", f"fp8: {NATIVE}", f"fp8w: {NATIVE} FP8_WEIGHTS=1"]
    try:
        chosen = overrides.variants(args.lora_variant or texts)
    except overrides.OverrideError as err:
        raise SystemExit(f"curve_parity: {err}") from None
    runs = ([reference] if reference else []) + [v for v in chosen if v != reference]
    seeds = [f"{reference.label}-seed{k}" for k in range(1, args.lora_seeds + 1)] if reference else []
    # the noise first: a call cut short keeps it
    runs[1:1] = [overrides.Variant(label, reference.overrides) for label in seeds]
    control_text = args.lora_control or (
        "bf16-compile: COMPILE=1" if args.mlperf_regime and not seeds else None
    )
    control = None if control_text in (None, "none") else overrides.variant(control_text)
    if control and control.label not in [v.label for v in runs]:
        runs.append(control)
    labels = [v.label for v in runs]
    if twice := sorted({label for label in labels if labels.count(label) > 1}):
        raise SystemExit(
            f"curve_parity: variant label(s) {', '.join(twice)} given twice (one label, one curve)"
        )
    common = overrides.variant(args.common).overrides
    runs = [overrides.Variant(v.label, {**common, **v.overrides}) for v in runs]
    warmup = warmup if args.lora_warmup is None else args.lora_warmup
    settings = {v.label: v.overrides for v in runs}
    if reference is None:
        torch.manual_seed(0)
        ours, step = lora_ours(shape, {**common, **overrides.variant(eager).overrides}, device)
        start = overrides.base("llama2_70b_lora", None, LORA_VALUES)
        recompute = overrides.build(LoraConfig, start, common).activation_checkpointing
        curves["peft-bf16"] = train_curve(lora_peer(shape, ours, device, recompute, warmup), batches)
        settings["peft-bf16"] = {}
        del ours
    part = {
        "reference": reference.label if reference else "peft-bf16",
        "control": control and control.label,
        "seeds": seeds,
        "shape": str(shape),
        "curves": curves,
        "vocab": shape.vocab_size,
        "dropout": dropout,
        "warmup_steps": warmup,
        "settings": settings,
    }
    for v in runs:
        torch.manual_seed(0)
        _, step = lora_ours(shape, v.overrides, device, dropout, warmup, args.mesh, args.world)
        if v.label in seeds:  # the same weights (drawn above), other dropout masks: the seeds of its calls
            torch.manual_seed(DROPOUT_SEEDS + seeds.index(v.label) + 1)
        curves[v.label] = train_curve(step, batches)
        release(device)
        args.save(part)
    return part


# ---- Llama 3.1 8B ----


def llama_ours(shape, asked: dict[str, str], device):
    _, step = build_ours(LlamaPretrainConfig, LLAMA_VALUES, asked, shape, device)
    return lambda i, batch, steps: train_step(step, [batch], lr_at(i, LLAMA_LR, steps, 10))[0]


def llama_peer(shape, device):
    """Hugging Face's Llama given our initial weights, float32 masters and bf16 autocast, torch's AdamW."""
    import transformers

    from training.llama import optim

    with torch.device(device):
        model = transformers.LlamaForCausalLM(peers.hf_config(shape))
    torch.manual_seed(0)
    peers.init_hf_like_ours(model, shape)
    model.train()
    optimizer, _ = optim.build_optimizer(
        model, 3e-4, (0.9, 0.95), 1e-5, 0.1, fused=device.type == "cuda", impl="torch"
    )
    step = peers.hf_step(model, optimizer, clip=1.0, autocast=torch.autocast(device.type, torch.bfloat16))
    return lambda i, batch, steps: step([batch], lr_at(i, LLAMA_LR, steps, 10))


def part_llama(args, device) -> dict:
    shape = PRESETS["8b"].replace(num_layers=args.layers, max_seq_length=args.seq)
    if args.tiny:
        shape = shapes.tiny(PRESETS["8b"], 32000, args.seq)
    rows = excerpt(args.steps * 4, args.seq + 1).to(device)  # 4 rows a step
    batches = [(b[:, :-1], b[:, 1:]) for b in rows.split(4)]
    curves = {"hf-bf16": train_curve(llama_peer(shape, device), batches)}
    release(device)
    texts = [
        f"bf16-eager: {EAGER}",
        "bf16: COMPILE=1",
        f"fp8: COMPILE=1 {NATIVE}",
        "fp8-torchao: COMPILE=1 PRECISION=fp8 FP8_BACKEND=torchao",
    ]
    settings = {"hf-bf16": {}}
    try:
        chosen = overrides.variants(args.llama_variant or texts)
    except overrides.OverrideError as err:
        raise SystemExit(f"curve_parity: {err}") from None
    for v in chosen:
        if v.overrides.get("FP8_BACKEND") == "torchao" and device.type != "cuda":
            continue
        torch.manual_seed(0)
        curves[v.label] = train_curve(llama_ours(shape, v.overrides, device), batches)
        settings[v.label] = v.overrides
        release(device)
    return {
        "reference": "hf-bf16",
        "shape": str(shape),
        "curves": curves,
        "vocab": shape.vocab_size,
        "settings": settings,
    }


# ---- BERT ----


# what the BERT curve sets of the settings it does not read (no data, its own rows); LR: the schedule's peak
BERT_VALUES = {"DATADIR": "/nonexistent", "MAX_STEPS": "1", "LR": "1e-3"}
BERT_VARIANTS = (
    "bf16-eager: COMPILE=0 ATTENTION=sdpa PRECISION=bf16",
    "bf16: COMPILE=1 PRECISION=bf16",
    f"fp8: COMPILE=1 {NATIVE}",
)


def part_bert(args, device) -> dict:
    import tempfile

    import transformers

    from training.bert import data
    from training.bert.build import build_run
    from training.bert.config import BertConfig
    from training.bert.model import BertShape
    from training.bert.optim import Lamb, param_groups, poly_warmup_lr
    from training.common import dist

    shape = BertShape(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if args.tiny:
        shape = BertShape(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
    rows, seq = 32 if not args.tiny else 4, 128
    try:
        chosen = overrides.variants(args.bert_variant or BERT_VARIANTS)
    except overrides.OverrideError as err:
        raise SystemExit(f"curve_parity: {err}") from None
    folder = tempfile.TemporaryDirectory()
    # ours start from the peer's weights (saved below) as the trainer starts from a checkpoint
    initial = Path(folder.name, "initial.pt")
    values = {**BERT_VALUES, "BATCHSIZE": str(rows), "INIT_CHECKPOINT": str(initial)}
    try:
        start = overrides.base("bert", None, values)
        # every variant first: a bad one stops the call before anything trains
        specs = {
            v.label: overrides.build(
                BertConfig, start, {**v.overrides, **({} if device.type == "cuda" else {"COMPILE": "0"})}
            ).run_spec(shape)
            for v in chosen
        }
    except overrides.OverrideError as err:
        raise SystemExit(f"curve_parity: {err}") from None
    all_rows = text_rows(rows * args.steps, seq)
    batches = [data.collate(all_rows[i * rows : (i + 1) * rows], seq) for i in range(args.steps)]
    config = transformers.BertConfig(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        intermediate_size=shape.intermediate_size,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    hf = transformers.BertForPreTraining(config).to(device)
    torch.save({k: v.detach().cpu() for k, v in hf.state_dict().items()}, initial)
    o = overrides.build(BertConfig, start, {}).run_spec(shape).optimizer  # the peer takes BERT's LAMB
    lr, total = o.lr, args.steps
    lamb = Lamb(
        param_groups(hf, o.weight_decay), lr=lr, betas=o.betas, eps=o.eps, max_grad_norm=o.max_grad_norm
    )
    hf_step = peers.hf_bert_step(hf, lamb, seq, torch.autocast(device.type, torch.bfloat16), device)
    curves = {"hf-bf16": train_curve(lambda i, b, _: hf_step(b, poly_warmup_lr(i, lr, total, 5)), batches)}
    del hf, lamb
    release(device)
    info = dist.init_distributed()
    settings = {"hf-bf16": {}}
    for v in chosen:
        _, step, _ = build_run(specs[v.label], info)
        curves[v.label] = train_curve(
            lambda i, b, _, step=step: step(iter([b]), poly_warmup_lr(i, lr, total, 5)), batches
        )
        settings[v.label] = v.overrides
        del step
        release(device)
    folder.cleanup()
    uniform = parity.uniform_loss(shape.vocab_size) + math.log(2)
    return {
        "reference": "hf-bf16",
        "shape": str(shape),
        "curves": curves,
        "uniform": uniform,
        "vocab": shape.vocab_size,
        "settings": settings,
    }


# ---- shared ----


def train_curve(step, batches) -> list[float]:
    losses = [step(i, batch, len(batches)) for i, batch in enumerate(batches)]
    return [float(x) for x in losses]


def release(device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    torch._dynamo.reset()


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = list(results["parts"])
    fig, axes = plt.subplots(2, len(parts), figsize=(5 * len(parts), 7), squeeze=False)
    for col, name in enumerate(parts):
        part = results["parts"][name]
        ref = np.array(part["curves"][part["reference"]])
        for variant, losses in part["curves"].items():
            axes[0][col].plot(losses, label=variant, lw=1.2)
            axes[1][col].plot(100 * (np.array(losses) - ref) / ref, label=variant, lw=1.2)
        axes[0][col].set_title(f"{name}: loss per step")
        axes[1][col].set_title(f"{name}: % off {part['reference']}")
        axes[1][col].set_xlabel("optimizer step")
        axes[0][col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="*", default=["lora", "llama", "bert"], help="lora, llama, bert (all)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--layers", type=int, default=4, help="blocks of the Llama models at full width")
    ap.add_argument("--seq", type=int, default=None, help="LoRA: 8192, Llama: 2048 (64 with --tiny)")
    ap.add_argument("--tiny", action="store_true", help="toy shapes on the CPU (smoke test)")
    ap.add_argument(
        "--set",
        dest="common",
        default="",
        metavar="'NAME=VALUE ...'",
        help="lora: overrides every variant of ours starts from (ACTIVATION_CHECKPOINTING=1: "
        "deeper models on one GPU; the peer recomputes too)",
    )
    ap.add_argument(
        "--mlperf-regime",
        action="store_true",
        help="lora: dropout 0.1, no warm-up (MLPerf's); ours in bf16 the reference",
    )
    ap.add_argument(
        "--lora-variant",
        action="append",
        default=None,
        metavar="'LABEL: NAME=VALUE ...'",
        help="lora: a variant of ours to run, repeatable (`perf/lib/overrides.py`)",
    )
    for part in ("llama", "bert"):
        ap.add_argument(
            f"--{part}-variant",
            action="append",
            default=None,
            metavar="'LABEL: NAME=VALUE ...'",
            help=f"{part}: a variant of ours to run, repeatable (`perf/lib/overrides.py`)",
        )
    ap.add_argument(
        "--lora-control",
        default=None,
        metavar="'LABEL: NAME=VALUE ...'",
        help="lora: a bf16 variant run beside the others whose distance from the reference "
        "widens their tolerance step by step (`perf/lib/parity.py`; default with "
        "--mlperf-regime 'bf16-compile: COMPILE=1', else none)",
    )
    ap.add_argument(
        "--lora-seeds",
        type=int,
        default=None,
        help="lora: runs of the reference's model with other dropout seeds "
        "(`<reference>-seedN`), whose spread from the reference is the noise every variant "
        "is judged against "
        "(default with --mlperf-regime 1, else 0)",
    )
    ap.add_argument(
        "--lora-warmup",
        type=int,
        default=None,
        help="lora: warm-up steps of the learning rate (5; 0 with --mlperf-regime)",
    )
    args = ap.parse_args()
    args.lora_seeds = (1 if args.mlperf_regime else 0) if args.lora_seeds is None else args.lora_seeds
    if args.lora_seeds < 0:
        ap.error(f"--lora-seeds {args.lora_seeds}: a count of runs, 0 or more")
    if unknown := set(args.parts) - {"lora", "llama", "bert"}:
        ap.error(f"unknown part(s) {', '.join(sorted(unknown))}: lora, llama, bert")
    gpu = torch.cuda.is_available() and not args.tiny
    procs = processes.start(gpu, group=False)
    if procs.world > 1 and (args.parts != ["lora"] or not args.mlperf_regime):
        ap.error(
            "under torchrun: lora with --mlperf-regime only (its reference, ours in bf16, sharded "
            "as the variants are)"
        )
    device, args.mesh, args.world, say = procs.device, procs.mesh(), procs.world, procs.say
    results = {
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "versions": versions(),
        "steps": args.steps,
        "tolerance": parity.TOLERANCE,
        "fp8_warmup_steps": FP8_WARMUP,
        "processes": procs.world,
        "parts": {},
    }
    say(f"{results['device']} x {procs.world}, torch {torch.__version__}, {args.steps} steps", flush=True)
    out = Path(os.environ.get("OUT", "."))

    def save(name: str, part: dict) -> None:
        """The results so far, judged, in $OUT (after each curve: a call cut short keeps what ran)."""
        if part["reference"] not in part["curves"]:
            return
        uniform = part.get("uniform") or parity.uniform_loss(part["vocab"])
        ran = part["curves"]
        control = part.get("control") if part.get("control") in ran else None
        seeds = tuple(s for s in part.get("seeds", ()) if s in ran)
        part["verdicts"] = parity.curve_verdicts(
            ran, part["reference"], uniform, FP8_WARMUP, control, seeds, part.get("settings")
        )
        results["parts"][name] = part
        if procs.main:
            (out / "curve_parity.json").write_text(json.dumps(results, indent=2) + "\n")
            plot(results, out / "curve_parity.png")

    for name in args.parts:
        t0 = time.perf_counter()
        part_args = argparse.Namespace(**vars(args))
        part_args.seq = args.seq or (64 if args.tiny else {"lora": 8192, "llama": 2048, "bert": 128}[name])
        part_args.save = lambda part, name=name, t0=t0: save(
            name, {**part, "seconds": time.perf_counter() - t0}
        )
        part = {"lora": part_lora, "llama": part_llama, "bert": part_bert}[name](part_args, device)
        save(name, {**part, "seconds": time.perf_counter() - t0})
        part = results["parts"][name]
        say(f"  {name}: {json.dumps(part['verdicts'])} ({part['seconds']:.0f} s)", flush=True)
    procs.end()
    if not procs.main:
        return 0
    dropout = ", ".join(f"{name} {part.get('dropout', 0.0):g}" for name, part in results["parts"].items())
    print(
        f"\n{results['device']} x {procs.world}: {args.steps} steps from the same weights on the same "
        f"batches (dropout: {dropout}); tolerance per step {parity.TOLERANCE} or, where other dropout "
        f"seeds ran, their spread (at least {parity.RESOLUTION:.2%}); FP8 from step {FP8_WARMUP}"
    )
    print("| part | variant | first loss | last loss | max % off | mean % off, last 10 steps | verdict |")
    print("|---|---|---|---|---|---|---|")
    for name, part in results["parts"].items():
        for variant, v in part["verdicts"].items():
            role = {part["reference"]: "reference", part.get("control"): "control; "}.get(variant, "")
            verdict = "reference" if role == "reference" else role + ("ok" if v["ok"] else "**FAIL**")
            verdict = "noise (another dropout seed)" if v.get("seed") else verdict
            if lever := v.get("lever"):
                verdict += f"; the lever against `{lever['reference']}`: " + (
                    "ok" if lever["ok"] else "**FAIL**"
                )
            off, last = 100 * v["max_rel_dev"], 100 * v["mean_rel_dev_last10"]
            print(
                f"| {name} | {variant} | {v['first']:.4f} | {v['last']:.4f} | {off:.2f} | {last:.2f} | "
                f"{verdict} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
