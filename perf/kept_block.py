"""What a kept (not recomputed) Llama 2 70B LoRA block holds for its backward: every tensor its forward saves,
by shape and dtype, in a config's mode (default the one-H200 config's), every block kept.

    python -m perf.kept_block [--config configs/llama2_70b_lora/config_H200_1x1x8.sh] [--set 'NAME=VALUE ...']
        [--layers 3] [--seq 8192]
    python -m perf.kept_block --tiny       # CPU smoke test

The saved tensors are seen through `torch.autograd.graph.saved_tensors_hooks` (a compiled block's too: its
autograd function saves them), each storage counted once, for the block whose forward was running (a
forward pre-hook on each block). Beside the list, the allocator's growth over each block's forward (GPU):
the bytes the block leaves allocated, its saved tensors and its output. One warm-up step compiles first.
What it answers: how many more blocks a card can keep, and which saved tensor to make smaller for that.
"""

from __future__ import annotations

import argparse
import collections
import sys
from dataclasses import replace
from pathlib import Path

import torch

from perf.lib import overrides, shapes
from perf.lib.rows import LoraRows
from training.llama.build import build_run
from training.llama.model import PRESETS
from training.llama.parallel import Parallelism
from training.llama.step import train_step
from training.llama2_70b_lora.config import LoraConfig

CONFIG = "configs/llama2_70b_lora/config_H200_1x1x8.sh"
# what it sets of the settings it does not read (no data, a random base, one row a step), as bench_lora
BENCH_VALUES = {"DATADIR": "/nonexistent", "INIT_CHECKPOINT": "none", "MINIBS": "1", "MBS": "1"}


def watch(model, device):
    """(per-block saved storages {ptr: (shape, dtype, bytes)}, per-block allocator growth, hooks context)."""
    saved = collections.defaultdict(dict)
    growth, current = {}, [None]

    def pre(i):
        def hook(module, args):
            current[0] = i
            if device.type == "cuda":
                growth[i] = -torch.cuda.memory_allocated()

        return hook

    def post(i):
        def hook(module, args, out):
            if device.type == "cuda":
                growth[i] += torch.cuda.memory_allocated()
            current[0] = None

        return hook

    for i, layer in enumerate(model.layers):
        layer.register_forward_pre_hook(pre(i))
        layer.register_forward_hook(post(i))

    def pack(t):
        if current[0] is not None and isinstance(t, torch.Tensor) and t.device.type != "meta":
            storage = t.untyped_storage()
            saved[current[0]].setdefault(storage.data_ptr(), (tuple(t.shape), t.dtype, storage.nbytes()))
        return t

    return saved, growth, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--config", type=Path, default=Path(CONFIG), help=f"the config whose mode is shown (default {CONFIG})"
    )
    ap.add_argument("--set", default="", metavar="'NAME=VALUE ...'", help="overrides on top of the config")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--tiny", action="store_true", help="a 2-layer toy model on the CPU, bf16 (smoke test)")
    args = ap.parse_args()
    device = torch.device("cpu" if args.tiny else "cuda")
    try:
        kept = {**overrides.parse(overrides.split(args.set)[1]), "ACTIVATION_CHECKPOINTING": "1", "ACL": "0"}
        if args.tiny:
            kept = {**kept, "PRECISION": "bf16", "COMPILE": "0"}
        start = overrides.base("llama2_70b_lora", None if args.tiny else args.config, BENCH_VALUES)
        spec = overrides.build(LoraConfig, start, kept).run_spec()
    except overrides.OverrideError as err:
        raise SystemExit(f"kept_block: {err}") from None
    seq = 64 if args.tiny else args.seq
    shape = PRESETS["70b"].replace(num_layers=args.layers, max_seq_length=seq)
    if args.tiny:
        shape = shapes.tiny(PRESETS["70b"], 512, seq)
    spec = replace(spec, shape=shape)
    torch.manual_seed(0)
    model, step, applied = build_run(spec, device, None, Parallelism(1, 1, 1, 1, 1, 1))
    rows = LoraRows(shape.vocab_size, seq, device, 0, 1, "stream", 2)
    train_step(step, [rows(0)], 1e-4)  # compiles
    saved, growth, hooks = watch(model, device)
    with hooks:
        train_step(step, [rows(1)], 1e-4)
    print(
        f"{torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, torch {torch.__version__}; "
        f"{shape.num_layers} blocks of the 70B width, {seq} tokens, every block kept; "
        f"{args.config if not args.tiny else 'tiny'} {args.set}; FP8: {applied.fp8.description}; "
        f"attention: {applied.attention}"
    )
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    for i in saved:  # a parameter saved for the backward costs nothing more
        saved[i] = {ptr: r for ptr, r in saved[i].items() if ptr not in params}
    block = 1 if shape.num_layers > 1 else 0  # the first block after the first: a middle block
    groups = collections.Counter()
    for shape_, dtype, nbytes in saved[block].values():
        groups[(shape_, str(dtype).replace("torch.", ""), nbytes)] += 1
    print(f"\nblock {block}: what its forward saved for the backward (parameters left out)")
    print("| shape | dtype | MiB each | storages |\n|---|---|---|---|")
    for (shape_, dtype, nbytes), n in sorted(groups.items(), key=lambda g: -g[0][2] * g[1]):
        print(f"| {list(shape_)} | {dtype} | {nbytes / 2**20:.2f} | {n} |")
    for i in sorted(saved):
        line = f"block {i}: saved {sum(r[2] for r in saved[i].values()) / 2**30:.3f} GiB"
        if i in growth:
            line += f", the allocator's growth over its forward {growth[i] / 2**30:.3f} GiB"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
