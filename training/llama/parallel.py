"""How a Llama run lays its model out over the ranks and which features it applies, one small function each,
in this fixed order (`apply_features`):

    apply_pp -> apply_fp8 -> apply_lora -> apply_tp -> apply_activation_checkpointing -> apply_compile
    -> apply_fsdp

(`apply_fp8` is `training.fp8`'s, `apply_lora` `training.lora`'s.) Each is a no-op when its feature is off
and returns one line saying what it did (the trainers log it as a `backend_*` MLLOG key). Beside them: the
layout arithmetic (`Parallelism`, `layout`), which feature combinations are implemented
(`feature_problems`), the device mesh and gradient clipping over sharded parameters.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from training.common.config import ConfigError
from training.fp8 import Fp8, Fp8Settings, apply_fp8
from training.lora import LoraSettings, apply_lora


@dataclass(frozen=True)
class Parallelism:
    """How the world splits: world = dp x tp x pp x cp; GBS = MBS x dp x grad_accum."""

    world_size: int
    tp: int
    pp: int
    cp: int
    dp: int
    grad_accum: int


def layout(world_size: int, tp: int, pp: int, cp: int, global_batch: int, micro_batch: int) -> Parallelism:
    """The parallelism arithmetic: TP x PP x CP divides the world, and GBS = MBS x DP x grad-accum; a
    ConfigError naming the variables otherwise."""
    model_parallel = tp * pp * cp
    if world_size % model_parallel:
        raise ConfigError(
            f"TENSOR_MODEL_PARALLEL_SIZE x PIPELINE_MODEL_PARALLEL_SIZE x CONTEXT_PARALLEL_SIZE = "
            f"{tp} x {pp} x {cp} = {model_parallel} does not divide the world size {world_size} "
            f"(DGXNNODES x DGXNGPU)"
        )
    dp = world_size // model_parallel
    if global_batch % (micro_batch * dp):
        raise ConfigError(
            f"GBS={global_batch} is not a multiple of MBS x data-parallel size = {micro_batch} x {dp} "
            f"(world {world_size} / TP x PP x CP {model_parallel})"
        )
    accum = global_batch // (micro_batch * dp)
    if accum < pp:
        raise ConfigError(
            f"PIPELINE_MODEL_PARALLEL_SIZE={pp} needs at least as many micro-batches per step: "
            f"GBS / (MBS x data-parallel size) = {accum}"
        )
    return Parallelism(world_size, tp, pp, cp, dp, accum)


def feature_problems(
    tp: int, pp: int, cp: int, fp8_backend: str | None, compile: bool, seq_length: int, num_layers: int,
    lora: bool = False,
) -> list[str]:  # fmt: skip
    """The feature combinations that are not implemented (or cannot be), each naming its variables.
    `fp8_backend`: FP8_BACKEND when FP8 is on, else None; `lora`: LoRA adapters on."""
    problems = []
    if lora and (tp > 1 or pp > 1 or cp > 1):
        problems.append(
            "LoRA with TENSOR_MODEL_PARALLEL_SIZE, PIPELINE_MODEL_PARALLEL_SIZE or "
            "CONTEXT_PARALLEL_SIZE > 1 is not implemented (FSDP2 over data parallelism only)"
        )
    if pp > 1:
        # only torchao's stateless scaling is tested with pipelines: Transformer Engine would need its
        # autocast around the schedule's forwards, and PyTorch's stage infers its shapes by running
        # forward and backward on uninitialized tensors, whose amax would become the native FP8 scales
        others = [name for name, on in (
            ("TENSOR_MODEL_PARALLEL_SIZE>1", tp > 1),
            ("CONTEXT_PARALLEL_SIZE>1", cp > 1),
            (f"FP8 with FP8_BACKEND={fp8_backend} (torchao runs)", fp8_backend not in (None, "torchao")),
            ("COMPILE=1", compile),
        ) if on]  # fmt: skip
        if others:
            problems.append(f"PIPELINE_MODEL_PARALLEL_SIZE>1 with {', '.join(others)} is not implemented")
        if num_layers % pp:
            problems.append(f"{num_layers} layers do not split into PIPELINE_MODEL_PARALLEL_SIZE={pp} equal "
                            "stages")  # fmt: skip
    if cp > 1:
        if tp > 1:
            problems.append("CONTEXT_PARALLEL_SIZE>1 with TENSOR_MODEL_PARALLEL_SIZE>1 is not implemented")
        if compile:
            problems.append("CONTEXT_PARALLEL_SIZE>1 with COMPILE=1 is not implemented (PyTorch's context "
                            "parallelism swaps the attention function at run time)")  # fmt: skip
        if seq_length % (2 * cp):
            problems.append(f"SEQ_LENGTH={seq_length} is not a multiple of 2 x CONTEXT_PARALLEL "
                            "(each rank holds a head and a tail chunk of every sequence)")  # fmt: skip
    if fp8_backend is not None and tp > 1 and fp8_backend != "native":
        problems.append(
            f"FP8 with TENSOR_MODEL_PARALLEL_SIZE>1 runs with FP8_BACKEND=native only (not {fp8_backend!r})"
        )
    return problems


@dataclass(frozen=True)
class Features:
    """What a Llama run applies to its model besides the layout: the arguments of `apply_features`."""

    fp8: Fp8Settings | None = None
    lora: LoraSettings | None = None
    activation_checkpointing: bool = False
    checkpoint_layers: int | None = None  # with activation checkpointing: the first this many blocks only
    keep_attention: bool = False  # with activation checkpointing: the recompute skips the attention kernel
    compile: bool = False
    param_dtype: torch.dtype = torch.bfloat16  # FSDP2's compute copy of the parameters
    reduce_dtype: torch.dtype = torch.float32  # FSDP2's gradient reduce-scatter
    reshard_after_forward: bool = True


def apply_features(
    model: nn.Module, mesh: DeviceMesh | None, features: Features
) -> tuple[Fp8, dict[str, str]]:
    """Apply the layout and the features to a built (meta or materialized) model, in the fixed order.
    Returns the FP8 hooks and, per feature, what was done (in that order)."""
    applied = {"pipeline_parallel": apply_pp(model, mesh)}
    fp8 = apply_fp8(model, features.fp8)
    applied["fp8"] = fp8.description
    applied["lora"] = apply_lora(model, features.lora)
    applied["tensor_parallel"] = apply_tp(model, mesh)
    applied["activation_checkpointing"] = apply_activation_checkpointing(
        model, features.activation_checkpointing, features.checkpoint_layers, features.keep_attention
    )
    applied["compile"] = apply_compile(model, features.compile, features.fp8 is not None)
    applied["data_parallel"] = apply_fsdp(
        model, mesh, features.param_dtype, features.reshard_after_forward, features.reduce_dtype
    )
    return fp8, applied


def transformer_blocks(model: nn.Module) -> nn.ModuleList:
    """The decoder blocks: ours (`model.layers`) or a Hugging Face Llama's (`model.model.layers`)."""
    return model.layers if hasattr(model, "layers") else model.model.layers


def build_mesh(device_type: str, dp: int, tp: int, cp: int = 1, pp: int = 1) -> DeviceMesh | None:
    """A (dp, pp, cp, tp) mesh over all ranks, tp varying fastest (rank = ((dp_rank x pp + pp_rank) x cp +
    cp_rank) x tp + tp_rank); None for a single process."""
    if dp * pp * cp * tp == 1:
        return None
    return init_device_mesh(device_type, (dp, pp, cp, tp), mesh_dim_names=("dp", "pp", "cp", "tp"))


def apply_pp(model: nn.Module, mesh: DeviceMesh | None) -> str:
    """Keep this rank's pipeline stage only: an equal slice of the blocks, the embedding on the first stage,
    the final norm and output layer on the last (the others become None and the model passes hidden states).
    The schedule that runs the stages is built by the trainer (`pipeline_schedule`)."""
    if mesh is None or mesh["pp"].size() == 1:
        return "off"
    stage, stages = mesh["pp"].get_local_rank(), mesh["pp"].size()
    per = len(model.layers) // stages
    first = stage * per
    model.layers = nn.ModuleList(list(model.layers)[first : first + per])
    if stage > 0:
        model.embed_tokens = None
    if stage < stages - 1:
        model.norm, model.lm_head = None, None
    return f"stage {stage} of {stages} (blocks {first}-{first + per - 1}), 1F1B schedule"


def pipeline_schedule(model: nn.Module, mesh: DeviceMesh, device: torch.device, microbatches: int, loss_fn):
    """PyTorch's 1F1B schedule over this rank's stage: `step` runs the step's micro-batches (forward and
    backward, gradients averaged over them), `eval` their forwards only. `loss_fn` runs on the last stage."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    stage = PipelineStage(
        model, mesh["pp"].get_local_rank(), mesh["pp"].size(), device, group=mesh["pp"].get_group()
    )
    return Schedule1F1B(stage, n_microbatches=microbatches, loss_fn=loss_fn, scale_grads=True)


def pipeline_step(schedule, mesh: DeviceMesh, tokens, labels, losses: list, train: bool = True) -> None:
    """One pass of the step's micro-batches through the pipeline: the first stage feeds the tokens, the last
    computes the loss (appended per micro-batch to `losses`), the ones between pass activations on."""
    stage, stages = mesh["pp"].get_local_rank(), mesh["pp"].size()
    run = schedule.step if train else schedule.eval
    inputs = (tokens,) if stage == 0 else ()
    run(*inputs, **({"target": labels, "losses": losses} if stage == stages - 1 else {}))


def context_parallel(mesh: DeviceMesh | None, tokens: torch.Tensor, labels: torch.Tensor):
    """(context, position ids) for one micro-batch. With CP, PyTorch's context parallelism shards tokens,
    labels and positions along the sequence when the context is entered (in place; each rank keeps a head
    and a tail chunk, which balances causal attention) and runs SDPA as ring attention inside it, backward
    included. Without CP: a null context and None (the model's own positions)."""
    if mesh is None or mesh["cp"].size() == 1:
        return contextlib.nullcontext(), None
    from torch.distributed.tensor.experimental import context_parallel as cp_context

    # (1, seq), as the model's own default: the compiled blocks see the shapes of the warm-up and evaluation
    positions = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0)
    buffers = [tokens, labels, positions]
    return cp_context(
        mesh["cp"], buffers=buffers, buffer_seq_dims=[1, 1, 1], no_restore_buffers=set(buffers)
    ), positions


def apply_tp(model: nn.Module, mesh: DeviceMesh | None) -> str:
    """Megatron-style tensor parallelism through DTensor: q/k/v and gate/up column-wise, o/down row-wise,
    so each block does one all-reduce after attention and one after the MLP. Embeddings, norms and the
    output layer stay replicated across the TP group (sharded by FSDP over data parallelism)."""
    if mesh is None or mesh["tp"].size() == 1:
        return "off"
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {
        "self_attn.q_proj": ColwiseParallel(),
        "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(),
        "mlp.gate_proj": ColwiseParallel(),
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(),
    }
    for block in model.layers:
        parallelize_module(block, mesh["tp"], plan)
    return f"DTensor TP over {mesh['tp'].size()} ranks (attention heads and MLP columns)"


def apply_activation_checkpointing(
    model: nn.Module, enabled: bool, layers: int | None = None, keep_attention: bool = False
) -> str:
    """Recompute each block's forward in the backward (the first `layers` blocks only, when given: AMD's
    ACL), keeping only its input. With `keep_attention` the recompute runs in two halves around the attention
    kernel, whose output stays from the forward: one attention forward less a block, for 0.13 GiB more a
    block of the 70B width at 8192 tokens where the block compiles whole (the compiler recomputes q, k, v for
    the kernel's backward) and 0.28 GiB where the halves compile inside eager checkpoints (FP8: q, k, v kept
    too). A block with dropout (LoRA's) saves the random number generators' state and restores it for the
    recompute, which then drops what the forward dropped (so: after `apply_lora`)."""
    if not enabled:
        return "off"
    count = len(model.layers) if layers is None else min(layers, len(model.layers))
    for block in list(model.layers)[:count]:
        block.checkpointed, block.keep_attention = True, keep_attention
        block.random = any(isinstance(m, nn.Dropout) and m.p > 0 for m in block.modules())
    what = "recompute but the attention kernel" if keep_attention else "full recompute"
    return f"{what} of {count} of {len(model.layers)} blocks"


def apply_compile(model: nn.Module, enabled: bool, checkpoint_outside: bool = False) -> str:
    """torch.compile each block in place (parameter names unchanged); the embedding and output layer stay
    eager. (The trainer then also takes `compiled_cross_entropy` for its loss.) With `checkpoint_outside`
    (FP8 on), a checkpointed block compiles its forward only, inside the eager checkpoint: compiled together
    with the checkpoint, the tensors our FP8 functions save for their backward were kept, not recomputed
    (Llama 2 70B LoRA blocks on an H200: 1.1 GiB more per block kept after the forward; `perf/RESULTS.md`).
    BF16 blocks keep the checkpoint inside the compiled graph, where it does recompute."""
    if not enabled:
        return "off"
    blocks = transformer_blocks(model)
    outside = 0
    for block in blocks:
        if checkpoint_outside and getattr(block, "checkpointed", False):
            for part in ("_forward", "_project", "_after_attention"):  # (the halves: `keep_attention`)
                setattr(block, part, torch.compile(getattr(block, part)))
            outside += 1
        else:
            block.compile()
    inside = f", {outside} of them inside their eager checkpoint (FP8)" if outside else ""
    return f"torch.compile per block ({len(blocks)} blocks{inside}) and of the cross-entropy"


def apply_fsdp(
    model: nn.Module,
    mesh: DeviceMesh | None,
    param_dtype: torch.dtype,
    reshard_after_forward: bool = True,
    reduce_dtype: torch.dtype = torch.float32,
) -> str:
    """FSDP2 `fully_shard` per block, then the root (embedding, final norm, output layer): parameters kept
    in float32 and sharded over the data-parallel ranks, gathered in `param_dtype` for compute, gradients
    reduce-scattered in `reduce_dtype` (float32, or bf16: half the bytes copied into the collective and
    sent, the sharded result still added in float32). The last block keeps its gathered weights for the
    backward that follows; with `reshard_after_forward=False` every block does (no second all-gather in
    backward, at the cost of all blocks' gathered weights in memory between forward and backward: 16 GB in
    bf16 for 8B)."""
    if mesh is None or mesh["dp"].size() * mesh["cp"].size() == 1:
        return "off"  # (pipeline stages are not sharded across each other: each holds its own blocks)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # context-parallel ranks hold different tokens of the same sequences: they shard the weights too
    shard_mesh = mesh["dp", "cp"]._flatten("dp_cp") if mesh["cp"].size() > 1 else mesh["dp"]

    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    blocks = transformer_blocks(model)
    for i, block in enumerate(blocks):
        reshard = reshard_after_forward and i < len(blocks) - 1
        fully_shard(block, mesh=shard_mesh, mp_policy=policy, reshard_after_forward=reshard)
    fully_shard(model, mesh=shard_mesh, mp_policy=policy)
    names = {torch.bfloat16: "bf16", torch.float32: "fp32"}
    name, reduce = (names.get(d, str(d)) for d in (param_dtype, reduce_dtype))
    master = "fp32 master and reduce" if reduce == "fp32" else f"fp32 master, {reduce} reduce"
    kept = "" if reshard_after_forward else ", blocks kept gathered from forward to backward"
    return f"FSDP2 over {shard_mesh.size()} ranks ({name} compute params, {master}{kept})"


def reshard(model: nn.Module) -> None:
    """Return every FSDP2 module to its sharded state. After a forward under `torch.no_grad()` (evaluation,
    warm-up) the root group keeps its gathered parameters, and while it does, the module attributes (and so
    `model.parameters()`) are the gathered tensors, not the sharded parameters the optimizer updates and
    the gradients are reduced into; resharding also frees that memory."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


@torch.no_grad()
def clip_grad_norm_(
    parameters: list[nn.Parameter],
    max_norm: float,
    stages=None,
    optimizer: torch.optim.Optimizer | None = None,
) -> torch.Tensor:
    """Clip by the global L2 norm. Gradients may be DTensors on different meshes (FSDP's dp mesh for the
    embedding and output layer, the dp x tp mesh for TP blocks), which torch's clip_grad_norm_ cannot stack:
    norm each mesh's group, make it a full (replicated) value, then combine. Given a fused `optimizer`, the
    gradients are not scaled here: its update kernel divides them by `grad_scale` (the hook AMP's GradScaler
    uses), which saves a read and write of every gradient (3 ms of 31 per 8B step on an H100,
    `perf/parts.py llama-optim`)."""
    from torch.distributed.tensor import DTensor

    groups: dict[object, list[torch.Tensor]] = {}
    for p in parameters:
        if p.grad is not None:
            key = p.grad.device_mesh if isinstance(p.grad, DTensor) else None
            groups.setdefault(key, []).append(p.grad)
    squares = []
    for key, grads in groups.items():
        if key is None:  # plain tensors: each norm in float32 (torch's rounds a bf16 gradient's to bf16)
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0, dtype=torch.float32)))
        else:
            norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0, foreach=True)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        squares.append(norm.float() ** 2)
    fold = optimizer is not None and optimizer.defaults.get("fused")
    if fold:
        optimizer.grad_scale = None
    if not squares:
        return torch.zeros(())
    total = torch.stack(squares).sum()
    if stages is not None:  # pipeline parallelism: the other stages hold the other parameters' gradients
        torch.distributed.all_reduce(total, group=stages)
    total = total.sqrt()
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    if fold:
        optimizer.grad_scale = 1.0 / coef
        return total
    for grads in groups.values():  # scale the local shards in place
        local = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
        torch._foreach_mul_(local, coef.to(local[0].device))
    return total
