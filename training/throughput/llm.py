"""Llama 3.1 and Mistral 7B for the throughput suite: the shared Llama module (`training.llama.model`;
Mistral is a Llama shape with a sliding window), the Llama runs' features in their fixed order
(`training.llama.parallel.apply_features`: FP8 swap, activation checkpointing, compiled blocks, FSDP2 with
bf16 compute and fp32 master weights), their AdamW and clip, and their one step
(`training.llama.step.train_step`), fed synthetic tokens (random ids, as AMD's "synthesized dataset"), from
random weights."""

from __future__ import annotations

from collections.abc import Callable

import torch

from training.common.config import ConfigError
from training.fp8 import Fp8Settings
from training.llama import parallel
from training.llama.attention import TORCH_WINDOW_ATTENTION, choose_attention, cudnn_window_fault
from training.llama.build import FP8_MLP, AdamWSettings, RunSpec, StepSettings, build_run
from training.llama.step import train_step
from training.throughput import flops
from training.throughput.config import ModelSpec, RunArgs
from training.throughput.workload import Workload, gradient_sync

# torch.optim.AdamW's defaults (`AdamWSettings`), as AMD's script (constant lr); the throughput does not
# depend on them
ADAMW = AdamWSettings()
CLIP_NORM = 1.0


def describe_attention(backend: str, window: int | None, device: torch.device) -> str:
    """What the model's `attention()` runs for this backend, window and device."""
    if window is None:
        return backend
    if backend == "flash_attn":
        how = "flash-attn"
    elif backend == "flash4":
        how = "FlashAttention-4 (flash-attn-4)"
    elif backend == "cudnn":
        how = "cuDNN's banded SDPA (nvidia-cudnn-frontend)"
    elif device.type == "cuda" and TORCH_WINDOW_ATTENTION is not None:
        how = f"PyTorch's flash kernel (varlen_attn; not cuDNN's: {cudnn_window_fault(device)})"
    else:
        how = "SDPA with a band mask"
    return f"{backend}; sliding window {window} through {how}"


def run_spec(spec: ModelSpec, args: RunArgs, attention: str) -> RunSpec:
    """The run the flags describe: the model config's shape from random weights, FP8 (the weights all-gathered
    in FP8 where FSDP2 shards them), activation checkpointing and compiled blocks as asked, bf16 compute on
    GPUs (AdamW keeping the weights in bf16 where it can: `--bf16_weights`), fp32 on the CPU."""
    fp8 = None
    if args.enable_fp8:
        fp8 = Fp8Settings(backend=args.fp8_backend, gather_in_fp8=True, fuse_mlp=FP8_MLP)
    features = parallel.Features(
        fp8=fp8, activation_checkpointing=args.activation_checkpointing, compile=args.enable_compile
    )
    step = StepSettings(
        clip_norm=CLIP_NORM,
        sync_each_micro_batch=args.reduce_each_iteration,
        hold_bf16_weights=args.bf16_weights,
    )
    return RunSpec(spec.shape, features, step, ADAMW, attention=attention)


def build(spec: ModelSpec, args: RunArgs, device: torch.device, mesh, world: int) -> Workload:
    shape = spec.shape
    on_gpu = device.type == "cuda"
    try:
        attention = choose_attention(args.attention, device, shape.sliding_window)
    except ValueError as err:  # the kernel asked for cannot run here
        raise ConfigError(f"--attention {args.attention}: {err}") from None
    layout = parallel.Parallelism(world, 1, 1, 1, world, args.grad_accum)
    model, step, applied = build_run(run_spec(spec, args, attention), device, mesh, layout)
    held = applied.bf16_weights_held
    seq = shape.max_seq_length
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    generator = torch.Generator(device=device).manual_seed(args.seed + rank)

    def make_step(
        batch: int,
        accum: int,
        lr_at: Callable[[int], float] | None = None,
        pool: list[torch.Tensor] | None = None,
    ):
        """One optimizer step over `accum` micro-batches of `batch` random sequences (a pool of two,
        made on the device beforehand, so that no data movement is timed). A loss-parity bench
        (`perf/bench_throughput`) gives its own: `pool`, (batch, seq + 1) rows taken in turn, and `lr_at`, the
        learning rate of the n-th step (from 0), else the constant `ADAMW.lr`."""
        if held and accum > 1:  # (bf16 gradients would add up in bf16)
            raise ValueError(f"bf16 weights held by AdamW take one iteration per step, not {accum}")
        if pool is None:
            pool = [
                torch.randint(0, shape.vocab_size, (batch, seq + 1), device=device, generator=generator)
                for _ in range(2)
            ]
        micro = [(rows[:, :-1], rows[:, 1:]) for rows in pool]
        done = 0

        def run() -> torch.Tensor:
            nonlocal done
            taken = [micro[(done * accum + i) % len(micro)] for i in range(accum)]
            loss, _ = train_step(step, taken, ADAMW.lr if lr_at is None else lr_at(done))
            done += 1
            return loss

        return run

    precision = "bf16" if on_gpu else "fp32 (CPU)"
    how = f" ({held / 1e9:.2f} B matrix weights kept in bf16 by AdamW, autocast for the rest)" if held else ""
    fp8 = "on" if args.enable_fp8 else "off"
    backends = {
        "precision": f"{precision} compute{how}, fp32 master weights, FP8 {fp8}",
        "attention": describe_attention(applied.attention, shape.sliding_window, device),
        **applied.lines(),
        "optimizer": f"AdamW ({applied.optimizer}), clip {CLIP_NORM}",
    }
    sync = gradient_sync(applied.data_parallel.description, applied.sharded, args.reduce_each_iteration)
    backends["data_parallel"] = sync
    return Workload(
        name=spec.name,
        unit="sequence",
        tokens_per_item=seq,
        flops_per_item={"ours": flops.ours(shape, seq) * seq, "amd": flops.amd(shape, seq) * seq},
        accountings=flops.LLM_ACCOUNTINGS,
        backends=backends,
        make_step=make_step,
        blocks=shape.num_layers,
        seq=seq,
        params=sum(p.numel() for p in model.parameters()),
        compute=precision,
        model=model,
    )
