"""Curve parity with trusted references: our model and step against a trusted implementation from
the same initial weights on the same batches of real text, dropout off, for `--steps` optimizer steps (50 by
default), in bf16 and in every FP8 backend we ship; a table, $OUT/curve_parity.json and a plot.

    python -m perf.curve_parity [lora] [llama] [bert] [--steps 50]      # one GPU
    python -m perf.curve_parity lora --layers 40 --ac --mlperf-regime   # deeper, recomputed, MLPerf's regime
    python -m perf.curve_parity lora --layers 20 --ac --mlperf-regime --lora-warmup 5 \
        --lora-variants ours-bf16-compile,ours-fp8native             # a bf16 control beside FP8, warmed up
    python -m perf.curve_parity --tiny                                   # CPU smoke test (toy shapes)

- lora: Llama 2 70B's width, `--layers` blocks (4), one 8192-token row of the Wikipedia excerpt a step, its
  first third unscored (the GovReport rows' shape); the reference is Hugging Face `LlamaForCausalLM` + `peft`
  (r 16, alpha 32, on q, k, v, o) with the three q/k/v adapters sharing one A, which is exactly our fused
  q|k|v adapter (one A, B's rows split), given our base weights and A; AdamW (torch) over the adapters, clip
  0.3, lr 4e-4 (5 warm-up steps, cosine). Ours: eager with PyTorch kernels, the trainer's defaults (its
  attention, AdamW and dropout kernel; blocks not compiled, as the GPU configs run), native FP8, native FP8
  with the frozen base stored in FP8 (FP8_WEIGHTS).
- llama: Llama 3.1 8B's width, `--layers` blocks, 4 rows of 2048 tokens a step; the reference is Hugging Face
  `LlamaForCausalLM` given our initial weights (float32 masters, bf16 autocast); AdamW (torch) with
  betas (0.9, 0.95), weight decay 0.1 on matrices, clip 1.0, 10 warm-up steps to `LLAMA_LR` then cosine.
  Ours: eager, compiled (the trainer's AdamW), native FP8, torchao's float8.
- bert: BERT-Large, 32 rows of 128 tokens a step ([CLS] A [SEP] B [SEP], B the next text half the time, 15%
  of the tokens masked); the reference is Hugging Face `BertForPreTraining` with our LAMB (weight decay 0.01,
  not on biases and norms, clip 1.0), lr 1e-3 after 5 warm-up steps; ours starts from its weights
  (`from_hf_state_dict`): eager, compiled, native FP8.

Verdict per variant (`TOLERANCE`): the largest relative difference of its per-step loss from the reference's,
over all steps for bf16 variants, after the first `FP8_WARMUP` steps for FP8 ones (their delayed scaling
learns its scales), and the mean over the last 10 steps. Model FLOPs are not counted: this is about numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from perf import parity, text
from perf.timing import versions

TOLERANCE = {"bf16": 0.01, "fp8": 0.03}  # per step, relative to the reference's loss
# Llama 3.1 8B's peak learning rate here: at 3e-4 (5 warm-up steps) a 4-block model on 4 x 2048 tokens a step
# jumps from 11.4 to 14-20 in its first steps (H100): a chaotic stretch where any two runs part
LLAMA_LR = 3e-5
FP8_WARMUP = 5


def lr_at(step: int, peak: float, steps: int, warmup: int = 5) -> float:
    from training.llama.optim import cosine_with_warmup

    return cosine_with_warmup(step, peak, warmup, steps, peak / 10)


# ---- Llama 2 70B LoRA ----


def lora_batches(args, device, shape=None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The excerpt's first `args.steps` rows of `args.seq` tokens, their first thirds unscored: the rows
    `perf.bench_lora` trains on by default (`Rows`, stream)."""
    from perf.bench_lora import Rows
    from training.llama.model import PRESETS

    shape = shape or PRESETS["70b"]
    rows = Rows(shape, args.seq, device, 0, 1, "stream", ahead=args.steps)
    return [rows(i) for i in range(args.steps)]


def lora_ours(shape, modes: list[str], device, dropout: float = 0.0, warmup: int = 5):
    """(model, one-step function) of the trainer's build and step at `shape`."""
    from perf.lib import variants
    from training.llama.build import build_run
    from training.llama.parallel import Parallelism
    from training.llama.step import train_step

    base = variants.lora_run(shape, dropout=dropout)
    spec = variants.curve_lora_variant(base, modes, device.type == "cuda")
    model, step, _ = build_run(spec, device, None, Parallelism(1, 1, 1, 1, 1, 1))
    return model, lambda i, batch, steps: train_step(step, [batch], lr_at(i, 4e-4, steps, warmup))[0]


def lora_peer(shape, ours, device, recompute: bool = False, warmup: int = 5):
    """Hugging Face + peft with the q/k/v adapters sharing one A: `ours`' base weights and adapters
    (`recompute`: Hugging Face's gradient checkpointing of every block)."""
    import peft
    import transformers

    on_gpu = device.type == "cuda"
    dtype = torch.bfloat16
    config = transformers.LlamaConfig(**shape.to_hf_config(), attn_implementation="sdpa", use_cache=False)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config).to(dtype)
        # RoPE's inverse frequencies in float32, as ours (the cast above rounded them to bf16: at position
        # 8000 that moved the angles enough to put the first loss 0.15-0.19% off ours on the same weights)
        model.model.rotary_emb = type(model.model.rotary_emb)(config=config).to(device)
    base = {k: v for k, v in ours.state_dict().items() if "adapter" not in k}
    hf_state = {("lm_head.weight" if k == "lm_head.weight" else f"model.{k}"): v for k, v in base.items()}
    missing, unexpected = model.load_state_dict(hf_state, strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    lora = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, bias="none",
                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])  # fmt: skip
    model = peft.get_peft_model(model, lora)
    inner = model.base_model.model.model
    for block, mine in zip(inner.layers, ours.layers):
        attn, adapters = block.self_attn, mine.self_attn
        a = torch.nn.Parameter(adapters.qkv_adapter.lora_a.weight.detach().float().clone())
        b = adapters.qkv_adapter.lora_b.weight.detach().float()
        sizes = [attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features]
        for proj, rows in zip((attn.q_proj, attn.k_proj, attn.v_proj), b.split(sizes)):
            proj.lora_A["default"].weight = a  # one A for q, k and v: the fused adapter
            proj.lora_B["default"].weight = torch.nn.Parameter(rows.clone())
        attn.o_proj.lora_A["default"].weight = torch.nn.Parameter(
            adapters.o_adapter.lora_a.weight.detach().float().clone()
        )
        attn.o_proj.lora_B["default"].weight = torch.nn.Parameter(
            adapters.o_adapter.lora_b.weight.detach().float().clone()
        )
    if recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=4e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4,
                                  fused=on_gpu)  # fmt: skip
    return hf_llama_step(
        model, optimizer, params, clip=0.3, lr=lambda i, steps: lr_at(i, 4e-4, steps, warmup)
    )


def part_lora(args, device) -> dict:
    from training.llama.model import PRESETS, LlamaShape

    shape = PRESETS["70b"].replace(num_layers=args.layers, max_seq_length=args.seq)
    if args.tiny:
        shape = LlamaShape(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_heads=4, num_kv_heads=2,
                           vocab_size=32000, max_seq_length=args.seq, rope_scaling=None)  # fmt: skip
    batches = lora_batches(args, device, shape)
    curves = {}
    if args.mlperf_regime:  # dropout 0.1 and no warm-up, as MLPerf's recipe: ours in bf16 is the reference
        # (peft draws its own masks; ours draw the same ones in bf16 and FP8: one kernel, one seed a call)
        reference, dropout, warmup = "ours-bf16", 0.1, 0
        variants = ["ours-bf16", "ours-fp8native", "ours-fp8native-fp8w"]
    else:
        reference, dropout, warmup = "peft-bf16", 0.0, 5
        variants = ["ours-bf16-eager", "ours-bf16", "ours-fp8native", "ours-fp8native-fp8w"]
    if args.lora_variants:
        chosen = [v for v in args.lora_variants.split(",") if v != reference]
        variants = ([reference] if reference.startswith("ours") else []) + chosen  # (peft's runs first)
    warmup = warmup if args.lora_warmup is None else args.lora_warmup
    if reference == "peft-bf16":
        torch.manual_seed(0)
        ours, step = lora_ours(shape, ["bf16", "eager"], device)
        curves["peft-bf16"] = train_curve(lora_peer(shape, ours, device, args.ac, warmup), batches)
        del ours
    for name in variants:
        torch.manual_seed(0)
        modes = name.split("-")[1:] + (["ac"] if args.ac else [])
        _, step = lora_ours(shape, modes, device, dropout, warmup)
        curves[name] = train_curve(step, batches)
        release(device)
    return {"reference": reference, "shape": str(shape), "curves": curves, "vocab": shape.vocab_size,
            "dropout": dropout, "warmup_steps": warmup}  # fmt: skip


# ---- Llama 3.1 8B ----


def llama_batches(args, device):
    rows = 4
    ids = torch.from_numpy(text.rows(text.wiki_ids(), args.steps * rows, args.seq + 1))
    return [(b[:, :-1].to(device), b[:, 1:].to(device)) for b in ids.split(rows)]


def llama_ours(shape, name: str, device):
    from perf.lib import variants
    from training.llama.build import build_run
    from training.llama.parallel import Parallelism
    from training.llama.step import train_step

    spec = variants.curve_llama_variant(variants.llama_run(shape, 3e-4), name, device.type == "cuda")
    _, step, _ = build_run(spec, device, None, Parallelism(1, 1, 1, 1, 1, 1))
    return lambda i, batch, steps: train_step(step, [batch], lr_at(i, LLAMA_LR, steps, 10))[0]


def llama_peer(shape, device):
    import transformers

    from training.llama import optim

    config = transformers.LlamaConfig(**shape.to_hf_config(), attn_implementation="sdpa", use_cache=False)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config)
    torch.manual_seed(0)
    parity.init_hf_like_ours(model, shape)
    model.train()
    on_gpu = device.type == "cuda"
    optimizer, _ = optim.build_optimizer(model, 3e-4, (0.9, 0.95), 1e-5, 0.1, fused=on_gpu, impl="torch")
    params = [p for p in model.parameters() if p.requires_grad]
    return hf_llama_step(
        model, optimizer, params, clip=1.0, lr=lambda i, steps: lr_at(i, LLAMA_LR, steps, 10)
    )


def hf_llama_step(model, optimizer, params, clip: float, lr):
    """What a user of Hugging Face's Llama writes: bf16 autocast, the float32 loss, torch's clip and
    optimizer; `lr(step, steps)` the schedule."""
    from training.llama.model import cross_entropy

    device_type = next(model.parameters()).device.type

    def step(i, batch, steps):
        for group in optimizer.param_groups:
            group["lr"] = lr(i, steps)
        tokens, labels = batch
        with torch.autocast(device_type, torch.bfloat16):
            loss = cross_entropy(model(input_ids=tokens).logits, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def part_llama(args, device) -> dict:
    from training.llama.model import PRESETS, LlamaShape

    shape = PRESETS["8b"].replace(num_layers=args.layers, max_seq_length=args.seq)
    if args.tiny:
        shape = LlamaShape(num_layers=2, hidden_size=64, ffn_hidden_size=192, num_heads=4, num_kv_heads=2,
                           vocab_size=32000, max_seq_length=args.seq)  # fmt: skip
    batches = llama_batches(args, device)
    curves = {"hf-bf16": train_curve(llama_peer(shape, device), batches)}
    release(device)
    for name in ("ours-bf16-eager", "ours-bf16", "ours-fp8native", "ours-fp8-torchao"):
        if name.endswith("torchao") and device.type != "cuda":
            continue
        torch.manual_seed(0)
        curves[name] = train_curve(llama_ours(shape, name, device), batches)
        release(device)
    return {"reference": "hf-bf16", "shape": str(shape), "curves": curves, "vocab": shape.vocab_size}


# ---- BERT ----


def bert_rows(args, count: int, seq: int = 128, seed: int = 0) -> list[tuple[np.ndarray, ...]]:
    """Rows in the trainer's layout (one sequence each): [CLS] A [SEP] B [SEP], B the text after A or
    (label 1) a window from elsewhere, 15% of the positions masked with [MASK]."""
    rng = np.random.default_rng(seed)
    stream = text.wiki_ids()
    half = (seq - 3) // 2
    out = []
    for _ in range(count):
        start = int(rng.integers(0, len(stream) - 2 * seq))
        a = stream[start : start + half]
        is_random = int(rng.integers(0, 2))
        b_start = int(rng.integers(0, len(stream) - seq)) if is_random else start + half
        b = stream[b_start : b_start + seq - 3 - half]
        ids = np.concatenate([[text.CLS], a, [text.SEP], b, [text.SEP]]).astype(np.int64)
        seg = np.concatenate([np.zeros(len(a) + 2), np.ones(len(b) + 1)]).astype(np.int64)
        candidates = np.setdiff1d(np.arange(1, seq - 1), [len(a) + 1])
        pos = np.sort(rng.choice(candidates, round(0.15 * seq), replace=False))
        labels = ids[pos].copy()
        ids[pos] = text.MASK
        out.append((ids, seg, pos, labels, np.array([seq]), np.array([len(pos)]), np.array([is_random])))
    return out


def part_bert(args, device) -> dict:
    import transformers

    from training.bert import data
    from training.bert.attention import choose_attention
    from training.bert.build import apply_compile, autocast_context, fp8_settings
    from training.bert.model import BertForPackedPretraining, BertShape, from_hf_state_dict
    from training.bert.optim import Lamb, param_groups, poly_warmup_lr
    from training.bert.step import train_step
    from training.common import dist
    from training.fp8 import apply_fp8

    on_gpu = device.type == "cuda"
    shape = BertShape(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if args.tiny:
        shape = BertShape(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip
    rows, seq = 32 if not args.tiny else 4, 128
    all_rows = bert_rows(args, rows * args.steps, seq)
    batches = [data.collate(all_rows[i * rows : (i + 1) * rows], seq) for i in range(args.steps)]
    config = transformers.BertConfig(
        vocab_size=shape.vocab_size, hidden_size=shape.hidden_size, num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads, intermediate_size=shape.intermediate_size,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.BertForPreTraining(config).to(device)
    initial = from_hf_state_dict({k: v.detach().clone() for k, v in hf.state_dict().items()},
                                 shape.num_hidden_layers)  # fmt: skip
    lr, total = 1e-3, args.steps
    autocast = torch.autocast(device.type, torch.bfloat16)

    def lamb(model):
        return Lamb(param_groups(model, 0.01), lr=lr, betas=(0.9, 0.999), eps=1e-6, max_grad_norm=1.0)

    curves = {"hf-bf16": train_curve(hf_bert_step(hf, lamb(hf), lr, total, seq, autocast, device), batches)}
    del hf
    release(device)
    info = dist.init_distributed()
    for name in ("ours-bf16-eager", "ours-bf16", "ours-fp8native"):
        compiled = on_gpu and not name.endswith("eager")
        precision = "fp8" if "fp8" in name else "bf16"
        attention = choose_attention("auto") if compiled else "sdpa"  # the trainer's pick, or PyTorch's SDPA
        model = BertForPackedPretraining(shape, attention).to(device)
        model.load_state_dict(initial)
        fp8 = apply_fp8(model, fp8_settings("native") if precision == "fp8" else None)
        optimizer = lamb(model)
        train_model = apply_compile(model, compiled)
        context = autocast_context(precision, device, fp8)

        def ours_step(i, b, steps, train_model=train_model, optimizer=optimizer, context=context):
            for group in optimizer.param_groups:
                group["lr"] = poly_warmup_lr(i, lr, total, 5)
            return train_step(train_model, optimizer, iter([b]), 1, context, info)

        curves[name] = train_curve(ours_step, batches)
        release(device)
    uniform = parity.uniform_loss(shape.vocab_size) + math.log(2)
    return {"reference": "hf-bf16", "shape": str(shape), "curves": curves, "uniform": uniform}


def hf_bert_step(hf, optimizer, lr: float, total: int, seq: int, autocast, device):
    """Hugging Face's BERT step: its own loss (MLM + NSP, each a mean) and our LAMB."""
    from training.bert.optim import poly_warmup_lr

    hf.train()

    def step(i, b, steps):
        for group in optimizer.param_groups:
            group["lr"] = poly_warmup_lr(i, lr, total, 5)
        n = b.input_ids.shape[0]
        labels = torch.full((n * seq,), -100, dtype=torch.long, device=device)
        labels[b.mlm_index.to(device)] = b.mlm_labels.to(device)
        with autocast:
            out = hf(input_ids=b.input_ids.to(device), token_type_ids=b.segment_ids.to(device),
                     labels=labels.view(n, seq), next_sentence_label=b.nsp_labels.to(device))  # fmt: skip
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return out.loss.detach()

    return step


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


def compare(part: dict) -> dict:
    """Each variant's deviation from the reference: max over its compared steps, mean over the last 10."""
    ref = part["curves"][part["reference"]]
    uniform = part.get("uniform") or parity.uniform_loss(part["vocab"])
    out = {}
    for name, losses in part["curves"].items():
        kind = parity.kind_of(name)
        start = FP8_WARMUP if kind == "fp8" else 0
        dev = [abs(a - b) / abs(b) for a, b in zip(losses, ref)]
        worst = max(dev[start:], default=0.0) if name != part["reference"] else 0.0
        last = float(np.mean(dev[-10:]))
        degenerate = abs(losses[0] - uniform) < parity.UNIFORM
        ok = worst <= TOLERANCE[kind] and not degenerate and all(math.isfinite(x) for x in losses)
        out[name] = {"max_rel_dev": worst, "from_step": start, "mean_rel_dev_last10": last,
                     "tolerance": TOLERANCE[kind], "first": losses[0], "last": losses[-1], "ok": ok,
                     "degenerate": degenerate}  # fmt: skip
    return out


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
    ap.add_argument("--ac", action="store_true",
                    help="lora: recompute every block (deeper models on one GPU)")  # fmt: skip
    ap.add_argument("--mlperf-regime", action="store_true",
                    help="lora: dropout 0.1, no warm-up (MLPerf's); ours in bf16 the reference")  # fmt: skip
    ap.add_argument("--lora-variants", default=None,
                    help="lora: the variants to run (e.g. ours-bf16-compile,ours-fp8native; a name's "
                         "modes: eager, compile, fp8native, fp8w)")  # fmt: skip
    ap.add_argument("--lora-warmup", type=int, default=None,
                    help="lora: warm-up steps of the learning rate (5; 0 with --mlperf-regime)")  # fmt: skip
    args = ap.parse_args()
    if unknown := set(args.parts) - {"lora", "llama", "bert"}:
        ap.error(f"unknown part(s) {', '.join(sorted(unknown))}: lora, llama, bert")
    gpu = torch.cuda.is_available() and not args.tiny
    device = torch.device("cuda") if gpu else torch.device("cpu")
    results = {"device": torch.cuda.get_device_name() if gpu else "cpu", "versions": versions(),
               "steps": args.steps, "tolerance": TOLERANCE, "fp8_warmup_steps": FP8_WARMUP,
               "parts": {}}  # fmt: skip
    print(f"{results['device']}, torch {torch.__version__}, {args.steps} steps", flush=True)
    for name in args.parts:
        t0 = time.perf_counter()
        part_args = argparse.Namespace(**vars(args))
        part_args.seq = args.seq or (64 if args.tiny else {"lora": 8192, "llama": 2048, "bert": 128}[name])
        part = {"lora": part_lora, "llama": part_llama, "bert": part_bert}[name](part_args, device)
        part["verdicts"] = compare(part)
        part["seconds"] = time.perf_counter() - t0
        results["parts"][name] = part
        print(f"  {name}: {json.dumps(part['verdicts'])} ({part['seconds']:.0f} s)", flush=True)
        out = Path(os.environ.get("OUT", "."))  # after each part: a call cut short keeps what ran
        (out / "curve_parity.json").write_text(json.dumps(results, indent=2) + "\n")
        plot(results, out / "curve_parity.png")
    print(f"\n{results['device']}: {args.steps} steps from the same weights on the same batches (dropout "
          f"off); tolerance per step {TOLERANCE}, FP8 after step {FP8_WARMUP}")  # fmt: skip
    print("| part | variant | first loss | last loss | max % off | mean % off, last 10 steps | verdict |")
    print("|---|---|---|---|---|---|---|")
    for name, part in results["parts"].items():
        for variant, v in part["verdicts"].items():
            verdict = "reference" if variant == part["reference"] else ("ok" if v["ok"] else "**FAIL**")
            off, last = 100 * v["max_rel_dev"], 100 * v["mean_rel_dev_last10"]
            print(f"| {name} | {variant} | {v['first']:.4f} | {v['last']:.4f} | {off:.2f} | {last:.2f} | "
                  f"{verdict} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
