"""Llama 2 70B LoRA fine-tuning steps on one GPU: ours (the benchmark's own model build and step) against the
peer a user would pick, Hugging Face `LlamaForCausalLM` + `peft` LoRA, side by side in one process.

    python -m perf.bench_lora --layers 40 [--variants peft-bf16-ac,ours-bf16-ac,ours-fp8native-ac24]
        [--steps 6] [--warmup 2] [--seq 8192] [--reference ours-bf16-ac-eager-torchdropout-sdpa]
    torchrun --nproc_per_node=4 -m perf.bench_lora --layers 80 --variants peft-bf16-ac,ours-fp8native
    python -m perf.bench_lora --tiny          # CPU smoke test (under torchrun --nproc_per_node=2: FSDP2)
    python -m perf.bench_lora --layers 20 --text row --variants ours-fp8native-ac,ours-fp8torchao-ac

The 70B width (hidden 8192, FFN 28672, 64 / 8 heads, vocabulary 32000), `--layers` blocks, random frozen
weights, micro-batch 1 of `--seq` tokens whose last two thirds are scored (the GovReport rows' shape), by
default a new row of the bundled Wikipedia excerpt each step (`--text`, class `Rows`: the speed does not
depend on the ids, the loss parity does: on one row repeated, per-tensor FP8 memorises slower than bf16,
ours and torchao's alike, perf/RESULTS.md), at the learning rate `lr_at` gives (`--lr-warmup`).
- ours: `training.llama2_70b_lora.model.build_model` (bf16 frozen base, float32 adapters of rank 16, alpha 32,
  dropout 0.1 on the fused q|k|v and o projections, blocks compiled) and `training.llama.step.train_step`
  (loss, clip at 0.3, AdamW over the adapters); `fp8native`: our FP8 linears for the frozen base;
  `fp8torchao`: torchao's float8 (dynamic tensorwise scaling: an independent FP8 implementation).
- peer: `peft.get_peft_model(LoraConfig(r=16, lora_alpha=32, lora_dropout=0.1, target_modules=[q_proj,
  k_proj, v_proj, o_proj]))` on the Hugging Face model in bf16 (SDPA attention), its float32 loss, torch's
  fused AdamW and clip_grad_norm_ at 0.3 (eager: what a peft user writes).
Under torchrun with more than one process both sides are sharded with FSDP2 over the ranks, each decoder
block then the root, frozen weights and adapters gathered in bf16, gradients reduced in float32: ours as the
trainer does (`parallel.apply_fsdp`), the peer as an FSDP2 user of peft writes it (`fully_shard` per
`LlamaDecoderLayer`, `MixedPrecisionPolicy(bf16, float32)`; its adapters are float32, peft's default). Each
rank trains its own row; tokens/s are per GPU.
Variant modifiers: `-ac` recomputes every block in the backward (Hugging Face's gradient checkpointing for the
peer), `-acN` the first N blocks only (ours), `-eager` no compile, `-fp8w` (with fp8native) the frozen base
stored in FP8 (FP8_WEIGHTS=1: half the memory, no weight casts), `-pytorchcasts` FP8_CASTS=pytorch (no
Triton), `-ckptinside` FP8 blocks compiled together with their checkpoint, as BF16 blocks (by default FP8
blocks compile inside an eager checkpoint: `parallel.apply_compile`), `-keepattn` (with `-ac`) the recompute
skips the attention kernel (AC_KEEP_ATTENTION=1), `-flash4` FlashAttention-4 (ATTENTION=flash4), `-sdpa`
PyTorch's SDPA (ATTENTION=sdpa), `-torchdropout` LoRA's dropout and A in PyTorch, not our Triton kernel
(LORA_KERNEL=pytorch). Ours also
reports, from one step of its own (`memory_step`, on GPUs and under torchrun): `kept_after_forward_gib`,
memory the forward leaves allocated for its backward; and, as the backward reaches each block, the weights
FSDP2 still holds all-gathered and all memory allocated (`backward_gathered_gib`, `backward_allocated_gib`).
`--profile N` prints each variant's top N GPU kernels per step.

Loss parity (`perf/parity.py`): every variant's per-step losses (every step it ran, from the first) against
the reference variant's (`--reference`, run first, added when not listed: ours in bf16, eager, PyTorch's
SDPA and dropout), all from the same initial weights (the peer's base gets ours: `parity.init_hf_like_ours`;
its adapters are peft's own, one per projection) and the same row. Dropout draws other masks in the peer
and in our Triton kernel than in the reference: part of what the tolerance allows. A variant that fails
prints "invalid" instead of its speed ratio.

Model FLOPs (printed with the results), LoRA accounting: the frozen base runs forward and input gradients but
no weight gradients, so per token 4 x N (N: parameters without the input embedding) + 6 x seq x hidden x
layers (causal attention, forward and backward) + 6 x the adapters' parameters
(`LlamaShape.lora_flops_per_token`); recomputation is not counted. Times are CUDA-event medians.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from perf import curve_parity, parity
from perf.lib import variants
from perf.timing import matmul_peak, print_profile, take_peak, time_steps, versions
from training.llama.build import build_run
from training.llama.model import PRESETS, LlamaShape, cross_entropy
from training.llama.parallel import Parallelism
from training.llama.step import train_step

TINY = LlamaShape(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_heads=4, num_kv_heads=2,
                  vocab_size=256, max_seq_length=64, rope_theta=10000.0, rope_scaling=None)  # fmt: skip


def rank_of(mesh) -> int:
    return 0 if mesh is None else torch.distributed.get_rank()


class Rows:
    """The rows a rank trains on, step after step (`source`): `stream` the bundled Wikipedia excerpt's rows in
    order, a new one each step and each rank (BERT WordPiece ids, `perf.text`: training as it reads data);
    `row` one excerpt row every step; `random` one row of random ids every step (memorised within a few
    steps: a speed figure only). The first third of a row is not scored. Every variant starts from the first
    row. The first `ahead` rows are made before any step, on the device: no timed step waits for the host."""

    def __init__(self, shape: LlamaShape, seq: int, device, rank: int, world: int, source: str, ahead: int):
        self.shape, self.seq, self.device, self.rank, self.world = shape, seq, device, rank, world
        self.source = source
        self.made = [self._make(i) for i in range(ahead if source == "stream" else 1)]

    def __call__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.source != "stream":
            return self.made[0]
        return self.made[step] if step < len(self.made) else self._make(step)

    def _make(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        seq = self.seq
        if self.source == "random":
            g = torch.Generator(device=self.device).manual_seed(1 + self.rank)
            tokens = torch.randint(0, self.shape.vocab_size, (1, seq), device=self.device, generator=g)
            labels = torch.roll(tokens, -1, 1)
            labels[:, -1] = -100
        else:
            from perf import text

            offset = (step * self.world + self.rank) * (seq + 1)
            ids = text.rows(text.wiki_ids(), 1, seq + 1, offset)[0] % self.shape.vocab_size  # (--tiny's 256)
            row = torch.from_numpy(ids).to(self.device)
            tokens, labels = row[None, :-1].clone(), row[None, 1:].clone()
        labels[:, : seq // 3] = -100  # the prompt is not scored
        return tokens, labels


def lr_at(step: int, warmup: int) -> float:
    """The learning rate of step `step`: MLPerf's 4e-4 after `warmup` warm-up steps, then a cosine over
    50 steps, `perf/curve_parity.py lora --lora-warmup 5`'s schedule (`curve_parity.lr_at`), on the same
    rows, so the bench's first steps are that curve's. MLPerf's recipe has no warm-up, but from random
    weights at 20 blocks a constant 4e-4 throws every implementation (peft's too) into one spike at step 5
    (12 -> 16.4) where two runs of the same code part by several percent: per-step loss parity measures
    nothing there (perf/RESULTS.md, the curve table). `warmup` 0: a constant 4e-4."""
    return curve_parity.lr_at(step, 4e-4, 50, warmup) if warmup > 0 else 4e-4


def steps_run(args) -> int:
    """How many steps a variant runs: compile, memory, warm-up, timed, profiled (`bench`)."""
    return 2 + args.warmup + args.steps + (2 if args.profile else 0)


def bench_ours(shape, seq, modes, device, args, mesh, world) -> tuple[callable, dict]:
    """The benchmark's own build and step (`build_run` of its config's run, the variant's settings)."""
    spec = variants.lora_variant(variants.lora_run(shape), modes[0], modes[1:], device.type == "cuda")
    model, step, applied = build_run(spec, device, mesh, Parallelism(world, 1, 1, 1, world, 1))
    rows = Rows(shape, seq, device, rank_of(mesh), world, args.text, steps_run(args))
    losses = []

    def run():
        loss, _ = train_step(step, [rows(len(losses))], lr_at(len(losses), args.lr_warmup))
        losses.append(loss)

    adapters = sum(p.numel() for p in step.params)
    return run, {"adapters": adapters, "losses": losses, "fp8": applied.fp8.description, "model": model,
                 "ac": applied.activation_checkpointing.description, "optimizer": applied.optimizer,
                 "lora": applied.lora.description, "data_parallel": applied.data_parallel.description,
                 "attention": applied.attention}  # fmt: skip


def bench_peft(shape, seq, modes, device, args, mesh, world) -> tuple[callable, dict]:
    import peft
    import transformers

    config = transformers.LlamaConfig(**shape.to_hf_config(), attn_implementation="sdpa", use_cache=False)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with torch.device("meta"):  # built, wrapped and sharded before any rank allocates its part
        model = transformers.LlamaForCausalLM(config).to(dtype)
        lora = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.1, bias="none",
                               target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])  # fmt: skip
        model = peft.get_peft_model(model, lora)
    if "ac" in modes:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    sharded = "off"
    if mesh is not None:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        for layer in model.base_model.model.model.layers:
            fully_shard(layer, mesh=mesh["dp"], mp_policy=policy)
        fully_shard(model, mesh=mesh["dp"], mp_policy=policy)
        sharded = f"FSDP2 over {world} ranks ({str(dtype)[6:]} gather, fp32 reduce)"
    model.to_empty(device=device)
    parity.init_hf_like_ours(model, shape)  # our base's weights from the same seed (the same draws)
    with torch.no_grad():  # peft's init for the adapters (A kaiming, B zero)
        for name, p in model.named_parameters():
            if "lora_A" in name:
                torch.nn.init.kaiming_uniform_(p, a=5**0.5)
            elif "lora_B" in name:
                torch.nn.init.zeros_(p)
        inner = model.base_model.model.model
        inner.rotary_emb = type(inner.rotary_emb)(config=config).to(device)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=4e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4,
                                  fused=device.type == "cuda")  # fmt: skip
    rows = Rows(shape, seq, device, rank_of(mesh), world, args.text, steps_run(args))
    losses = []

    def run():
        tokens, labels = rows(len(losses))
        for group in optimizer.param_groups:
            group["lr"] = lr_at(len(losses), args.lr_warmup)
        loss = cross_entropy(model(input_ids=tokens).logits, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.3, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())

    adapters = sum(p.numel() for p in params)  # (global counts: DTensors report the full shape)
    return run, {"adapters": adapters, "losses": losses, "fp8": "off", "data_parallel": sharded,
                 "ac": "gradient checkpointing" if "ac" in modes else "off", "attention": "sdpa"}  # fmt: skip


def gathered_bytes(blocks: list[torch.nn.Module]) -> int:
    """Bytes of FSDP2's unsharded (all-gathered) parameter storages allocated now, over `blocks`. Read from
    FSDP2's private `FSDPParam` fields (`_unsharded_param`, `all_gather_outputs`, `_unsharded_inner_tensors`,
    torch 2.11), read only; a field that is absent counts 0."""
    seen, total = set(), 0
    for block in blocks:
        state = block._get_fsdp_state() if hasattr(block, "_get_fsdp_state") else None
        for param in getattr(getattr(state, "_fsdp_param_group", None), "fsdp_params", []):
            inner = getattr(param, "_unsharded_inner_tensors", None) or []
            for t in (
                getattr(param, "_unsharded_param", None),
                *getattr(param, "all_gather_outputs", []),
                *inner,
            ):
                storage = None if t is None else t.untyped_storage()
                if storage is not None and storage.nbytes() and storage.data_ptr() not in seen:
                    seen.add(storage.data_ptr())
                    total += storage.nbytes()
    return total


def memory_step(run, model: torch.nn.Module, device: torch.device) -> dict:
    """One step watched: what its forward leaves for the backward (GPU), and, each time the backward reaches a
    block (its output's gradient arrives: every later block's backward has run), the all-gathered weights
    still allocated and (GPU) all memory allocated: where a kept block's backward left its gathered weights,
    they would pile up towards block 0 (on 4 x H200 they do not: a kept block's 3.25 GiB of the first step's
    peak is the FP8 calibration pass, `training.fp8.calibrate`). On GPUs also where in the
    step the peak fell: the allocator's peak is read and reset at each mark (a block's forward starting and
    ending, the model's forward ending, the backward reaching a block, the step ending), so each stretch
    between two marks has its own peak (`peak_between`: the largest, and the marks around it). A block's
    forward after the model's is its recompute in the backward."""
    from training.throughput.run import memory_at_forward_end

    blocks, reached = list(getattr(model, "layers", [])), {}
    gpu = device.type == "cuda"
    marks: list[tuple[str, float]] = []  # (the mark, the peak in GiB since the one before)
    phase = ["forward"]

    def now() -> tuple[float, float | None]:
        allocated = torch.cuda.memory_allocated(device) / 2**30 if gpu else None
        return gathered_bytes(blocks) / 2**30, allocated

    @torch.compiler.disable  # called from compiled blocks' hooks: each label would be a recompile of its own
    def mark(label: str) -> None:
        if gpu:
            marks.append((label, take_peak(device)))

    def starts(i: int):
        return lambda module, args: mark(f"{phase[0]} of block {i} starts")

    def watch(i: int):
        def record(grad: torch.Tensor) -> None:
            reached.setdefault(i, now())
            mark(f"the backward reaches block {i}")

        def hook(module, args, out):
            mark(f"{phase[0]} of block {i} ends")
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(record)

        return hook

    def forward_ends(*_):
        mark("the model's forward ends")
        phase[0] = "recompute"

    handles = [block.register_forward_pre_hook(starts(i)) for i, block in enumerate(blocks)]
    handles += [block.register_forward_hook(watch(i)) for i, block in enumerate(blocks)]
    handles.append(model.register_forward_hook(forward_ends))
    try:
        with memory_at_forward_end(model, device) if gpu else contextlib.nullcontext([0]) as kept:
            before = torch.cuda.memory_allocated(device) if gpu else 0
            mark("the step starts")
            run()
            mark("the step ends")
    finally:
        for handle in handles:
            handle.remove()
    at = [reached.get(i, (None, None)) for i in range(len(blocks))]
    out = {"backward_gathered_gib": [gathered for gathered, _ in at]}
    if gpu:
        out["kept_after_forward_gib"] = (kept[0] - before) / 2**30
        out["backward_allocated_gib"] = [allocated for _, allocated in at]
        top = max(range(1, len(marks)), key=lambda k: marks[k][1])
        out["peak_between"] = {"gib": marks[top][1], "from": marks[top - 1][0], "to": marks[top][0]}
        forward_end = next(k for k, (label, _) in enumerate(marks) if "model" in label)
        out["forward_peak_gib"] = max(gib for _, gib in marks[1 : forward_end + 1])
    return out


def bench(variant: str, shape: LlamaShape, seq: int, args, device, mesh, world: int) -> dict:
    kind, precision, *modes = variant.split("-")
    if kind not in ("ours", "peft") or precision not in ("bf16", "fp8native", "fp8torchao"):
        raise SystemExit(
            f"variant {variant}: expected ours|peft - bf16|fp8native|fp8torchao [-ac|-acN|-eager]"
        )
    if precision != "bf16" and device.type != "cuda":
        return {"skipped": "FP8 needs a GPU"}
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    build = bench_ours if kind == "ours" else bench_peft
    run, info = build(shape, seq, [precision, *modes], device, args, mesh, world)
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
        print_profile(run, steps=2, top=args.profile, show=rank_of(mesh) == 0, title=f"{variant}:")
    ms = statistics.median(times)
    tokens_per_s = seq / ms * 1e3
    flops = shape.lora_flops_per_token(seq, info["adapters"])
    peak = take_peak(device)
    if mesh is not None:  # the slowest rank's time and the largest peaks
        both = torch.tensor([ms, peak, first_peak], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(both, torch.distributed.ReduceOp.MAX)
        ms, peak, first_peak = both.tolist()
        tokens_per_s = seq / ms * 1e3
    losses = [float(x) for x in info.pop("losses")]
    return {"ms": ms, "spread_ms": [min(times), max(times)], "tokens_per_s": tokens_per_s,
            "model_tflops": flops * tokens_per_s / 1e12, "peak_gib": peak, "first_step_s": first_s,
            "first_step_peak_gib": first_peak,
            "first_loss": losses[0], "last_loss": losses[-1], "losses": losses, **info}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="peft-bf16-ac,ours-bf16-ac,ours-fp8native-ac")
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--seq", type=int, default=None, help="default 8192 (64 with --tiny)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile", type=int, default=0, help="print this many top GPU kernels per variant")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer toy model on the CPU (smoke test)")
    ap.add_argument("--lr-warmup", type=int, default=5, help="learning-rate warm-up steps (lr_at)")
    ap.add_argument("--text", choices=("stream", "row", "random"), default="stream",
                    help="the rows trained on (class Rows): the excerpt's rows in order, one excerpt row "
                         "every step, one random row every step")  # fmt: skip
    ap.add_argument("--reference", default="ours-bf16-ac-eager-torchdropout-sdpa",
                    help="the variant the others' losses are compared with ('none': none)")  # fmt: skip
    args = ap.parse_args()
    gpu = torch.cuda.is_available() and not args.tiny
    world = int(os.environ.get("WORLD_SIZE", 1))
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if gpu else torch.device("cpu")
    mesh = None
    if world > 1:
        import torch.distributed as dist

        from training.llama.parallel import build_mesh

        if gpu:
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if gpu else "gloo", device_id=device if gpu else None)
        mesh = build_mesh(device.type, world, 1)
    main_rank = mesh is None or torch.distributed.get_rank() == 0
    shape = TINY if args.tiny else PRESETS["70b"].replace(num_layers=args.layers)
    seq = args.seq or (64 if args.tiny else 8192)
    shape = shape.replace(max_seq_length=seq)
    formula = "4 x N x tokens + 6 x seq x hidden x layers x tokens + 6 x adapters x tokens"
    results = {"device": torch.cuda.get_device_name() if gpu else "cpu", "versions": versions(), "seq": seq,
               "layers": shape.num_layers, "gpus": world if gpu else 0, "text": args.text,
               "bf16_matmul_tflops": matmul_peak(device), "runs": {},
               "flops_formula": formula}  # fmt: skip
    say = print if main_rank else (lambda *a, **k: None)
    say(f"{results['device']} x {world}, torch {torch.__version__}, {shape.num_layers} layers of the 70B "
        f"width, seq {seq}", flush=True)  # fmt: skip
    variants = args.variants.split(",")
    if args.reference != "none" and args.reference not in variants:
        variants.insert(0, args.reference)
    for variant in variants:
        try:
            r = bench(variant, shape, seq, args, device, mesh, world)
        except torch.cuda.OutOfMemoryError as err:
            r = {"error": f"out of memory: {str(err)[:600]}"}
        results["runs"][variant] = r
        say(f"  {variant}: {json.dumps(r)}", flush=True)
        gc.collect()
        if gpu:
            torch.cuda.empty_cache()
    if mesh is not None:
        torch.distributed.destroy_process_group()
    if not main_rank:
        return 0
    parity.check_all(results["runs"], args.reference, parity.uniform_loss(shape.vocab_size))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "bench_lora.json").write_text(json.dumps(results, indent=2) + "\n")
    peer = next((r for n, r in results["runs"].items() if n.startswith("peft") and "ms" in r), None)
    print(f"\n{results['device']} x {world}: Llama 2 70B width, {shape.num_layers} layers, seq {seq}, "
          f"micro-batch 1 per GPU, LoRA rank 16; model FLOPs {results['flops_formula']}; loss parity "
          f"against {args.reference} (tolerance per step: {parity.TOLERANCE})")  # fmt: skip
    print(
        "| variant | s/step | tokens/s per GPU | model TFLOP/s per GPU | peak GiB | vs peer | loss parity |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, r in results["runs"].items():
        if "ms" not in r:
            print(f"| {name} | {r.get('skipped') or r.get('error')} | | | | | |")
            continue
        check = r.get("parity")
        ratio = parity.ratio_cell(r["tokens_per_s"] / peer["tokens_per_s"] if peer else None, check)
        print(f"| {name} | {r['ms'] / 1e3:.3f} | {r['tokens_per_s']:.0f} | {r['model_tflops']:.1f} | "
              f"{r['peak_gib']:.1f} | {ratio} | {parity.column(check)} |")  # fmt: skip
    for name, r in results["runs"].items():
        if line := memory_line(r):
            print(f"memory, {name}: {line}")
    return 0


def memory_line(run: dict) -> str | None:
    """The memory step's figures (`memory_step`) in a line: what the forward left, and the all-gathered
    weights (and, on GPUs, all memory) as the backward reached the last block and block 0."""
    gathered, allocated = run.get("backward_gathered_gib") or [], run.get("backward_allocated_gib") or []
    if not gathered or gathered[0] is None or gathered[-1] is None:
        return None
    parts = (
        [f"the forward left {run['kept_after_forward_gib']:.3g} GiB"]
        if "kept_after_forward_gib" in run
        else []
    )
    for where, i in (("the last block", -1), ("block 0", 0)):
        held = f"{gathered[i]:.3g} GiB gathered"  # (3 digits: the CPU toy's are a few KiB)
        if allocated and allocated[i] is not None:
            held += f", {allocated[i]:.3g} GiB allocated"
        parts.append(f"as the backward reached {where}: {held}")
    if run.get("first_step_peak_gib"):
        parts.append(f"the first step's peak {run['first_step_peak_gib']:.3g} GiB, the later steps' "
                     f"{run['peak_gib']:.3g}")  # fmt: skip
    if peak := run.get("peak_between"):
        parts.append(f"the forward's peak {run['forward_peak_gib']:.3g} GiB; the step's "
                     f"{peak['gib']:.3g} GiB, between '{peak['from']}' and '{peak['to']}'")  # fmt: skip
    return "; ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
