"""How a Llama run lays its model out over the ranks and which features it applies, one small function each,
in this fixed order (`apply_features`):

    apply_pp -> apply_fp8 -> apply_lora -> apply_tp -> apply_activation_checkpointing -> apply_compile
    -> apply_fsdp

(with FP8's `mlp_activations_in_fp8`, the blocks left unrecomputed by activation checkpointing then keep
their MLPs' SwiGLU inputs in FP8: `training.fp8.save_mlp_activations_in_fp8`)

(`apply_fp8` is `training.fp8`'s, `apply_lora` `training.lora`'s.) Each is a no-op when its feature is off
and returns what it did as a `Change`: how many blocks or ranks it changed, and one line saying what (the
trainers log it as a `backend_*` MLLOG key). `apply_features` gathers them in a typed record, `Applied`,
which the step reads (whether FSDP2 shards the parameters decides the autocast) instead of the lines. Beside
them: the layout arithmetic (`Parallelism`, `layout`), which feature combinations are implemented
(`feature_problems`), the device mesh and gradient clipping over sharded parameters.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from training.common.config import ConfigError
from training.common.disclosure import PRECISION_NAMES, Disclosure, dtype_name, lowest
from training.fp8 import Fp8, Fp8Settings, apply_fp8, save_mlp_activations_in_fp8
from training.llama.checkpointing import Checkpointed
from training.llama.offload import HostOffload
from training.lora import LoraSettings, apply_lora

if TYPE_CHECKING:
    from training.fp4 import Fp4Settings


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
    tp: int, pp: int, cp: int, fp8_backend: str | None, compile: bool, seq_length: int, num_layers: int
) -> list[str]:
    """The feature combinations that are not implemented (or cannot be), each naming its variables.
    `fp8_backend`: FP8_BACKEND when FP8 is on, else None."""
    problems = []
    if pp > 1:
        # only torchao's stateless scaling is tested with pipelines: Transformer Engine would need its
        # autocast around the schedule's forwards, and PyTorch's stage infers its shapes by running
        # forward and backward on uninitialized tensors, whose amax would become the native FP8 scales
        others = [
            name
            for name, on in (
                ("TENSOR_MODEL_PARALLEL_SIZE>1", tp > 1),
                ("CONTEXT_PARALLEL_SIZE>1", cp > 1),
                (f"FP8 with FP8_BACKEND={fp8_backend} (torchao runs)", fp8_backend not in (None, "torchao")),
                ("COMPILE=1", compile),
            )
            if on
        ]
        if others:
            problems.append(f"PIPELINE_MODEL_PARALLEL_SIZE>1 with {', '.join(others)} is not implemented")
        if num_layers % pp:
            problems.append(
                f"{num_layers} layers do not split into PIPELINE_MODEL_PARALLEL_SIZE={pp} equal stages"
            )
    if cp > 1:  # (with tensor parallelism too: the 8B runs them as context parallelism, `model_layout`)
        if compile:
            problems.append(
                "CONTEXT_PARALLEL_SIZE>1 with COMPILE=1 is not implemented (PyTorch's context "
                "parallelism swaps the attention function at run time)"
            )
        if seq_length % (2 * cp):
            problems.append(
                f"SEQ_LENGTH={seq_length} is not a multiple of 2 x CONTEXT_PARALLEL "
                "(each rank holds a head and a tail chunk of every sequence)"
            )
    if fp8_backend is not None and tp > 1 and fp8_backend != "native":
        problems.append(
            f"FP8 with TENSOR_MODEL_PARALLEL_SIZE>1 runs with FP8_BACKEND=native only (not {fp8_backend!r})"
        )
    return problems


@dataclass(frozen=True)
class Features:
    """What a Llama run applies to its model besides the layout: the arguments of `apply_features`."""

    # FP8 for the blocks' linears. Its `gather_in_fp8` and `fuse_mlp` are asked for: taken where the layout
    # allows them (FP8 all-gathers where FSDP2 shards without tensor parallelism; fused MLPs without TP)
    fp8: Fp8Settings | None = None
    # 4-bit GEMMs for the blocks' linears instead (`training.fp4`), healing into FP8 with `fp8`'s settings
    fp4: Fp4Settings | None = None
    lora: LoraSettings | None = None
    activation_checkpointing: bool = False
    checkpoint_layers: int | None = None  # with activation checkpointing: the first this many blocks only
    keep_attention: bool = False  # with activation checkpointing: the recompute skips the attention kernel
    # the blocks after the recomputed ones whose saved activations wait in host memory (one GPU only)
    offload_layers: int = 0
    compile: bool = False
    # with FP8 and compile, a recomputed block compiles its forward inside its eager checkpoint (False: the
    # checkpoint compiled with the block, as bf16 blocks are: `apply_compile`)
    fp8_eager_checkpoint: bool = True
    # FSDP2 reduce-scatters the gradients in float32; False: in bf16 (GRAD_REDUCE_IN_FP32=0)
    grad_reduce_in_fp32: bool = True
    reshard_after_forward: bool = True


@dataclass(frozen=True)
class Change:
    """What one `apply_*` did: how many blocks (or ranks) it changed, 0 when its feature is off, and the line
    the run logs for it."""

    count: int = 0
    description: str = "off"


OFF = Change()


@dataclass(frozen=True)
class Applied:
    """What a run's build did to its model, feature by feature in `apply_features`' order, and what it chose
    besides (`training.llama.build.build_run`): the attention kernel, the resolved precision, the optimizer.
    The code after the build reads the typed facts (`sharded`, `compiled`, `checkpointed_blocks`); the run
    logs `lines()`."""

    pipeline_parallel: Change = OFF
    fp8: Fp8 = field(default_factory=Fp8)  # the FP8 hooks the step calls, and what FP8 did
    lora: Change = OFF
    tensor_parallel: Change = OFF
    activation_checkpointing: Change = OFF
    compile: Change = OFF
    data_parallel: Change = OFF
    attention: str = ""  # the attention backend the blocks run (`training.llama.attention.choose_attention`)
    precision: str = ""  # PRECISION resolved on this device: fp32, bf16 or fp8 (bf16 with FP8 matmuls)
    attention_precision: str = ""  # what the attention kernel multiplies in: fp8 (FP8_DPA), bf16 or fp32
    optimizer: str = ""  # which AdamW `optim.build_optimizer` took
    bf16_weights_held: int = 0  # matrix weights AdamW keeps in bf16 (`StepSettings.hold_bf16_weights`)
    # the lowest precision the layout's collectives carry (MLPerf's name); "" for one process
    collectives: str = ""

    FEATURES = (
        "pipeline_parallel",
        "fp8",
        "lora",
        "tensor_parallel",
        "activation_checkpointing",
        "compile",
        "data_parallel",
    )

    @property
    def sharded(self) -> bool:
        """FSDP2 shards the parameters (and gathers them in the compute dtype for each block)."""
        return self.data_parallel.count > 0

    @property
    def compiled(self) -> bool:
        return self.compile.count > 0

    @property
    def checkpointed_blocks(self) -> int:
        return self.activation_checkpointing.count

    def lines(self) -> dict[str, str]:
        """What each feature did, in the order applied: the trainers' `backend_*` MLLOG values."""
        return {name: getattr(self, name).description for name in self.FEATURES}

    def disclosure(self, layout: Parallelism, micro_batch_size: int) -> Disclosure:
        """The run's 6.x disclosure as built: the linears' lowest precision (`Fp8.linear_precision`: fp8, or
        mxfp4 / nvfp4 where 4-bit GEMMs run, emulated too), what the attention kernel multiplies in (fp8 with
        FP8_DPA, else the compute dtype), and the collectives' lowest precision (one process has none: its
        gradients' float32)."""
        compute = PRECISION_NAMES["bf16" if self.precision == "fp8" else self.precision]
        linear = self.fp8.linear_precision or compute
        attn = {"fp8": "fp8", **PRECISION_NAMES}.get(self.attention_precision, compute)
        comm = self.collectives or "fp32"
        return Disclosure(linear, attn, comm, micro_batch_size, layout.tp, layout.pp, layout.cp)


def apply_features(
    model: nn.Module,
    mesh: DeviceMesh | None,
    features: Features,
    param_dtype: torch.dtype = torch.bfloat16,
    device: torch.device | None = None,
) -> Applied:
    """Apply the layout and the features to a built (meta or materialized) model, in the fixed order.
    `param_dtype`: FSDP2's compute copy of the parameters; `device`: where the model will run (LoRA's
    dropout kernel is checked there). Returns what each feature did."""
    pipeline = apply_pp(model, mesh)
    if features.fp4 is not None:
        from training.fp4 import apply_fp4  # (only FP4 runs import the 4-bit package)

        if mesh is not None and mesh["tp"].size() > 1:
            raise ValueError("FP4=True with TENSOR_MODEL_PARALLEL_SIZE>1 is not implemented here")
        healing = features.fp8 or Fp8Settings(backend="native")
        fp8 = apply_fp4(model, features.fp4, healing, device or torch.device("cpu"))
    else:
        fp8 = apply_fp8(model, _fp8_for_layout(features.fp8, mesh))
    lora = apply_lora(model, features.lora, device)
    lora = Change(len(model.layers), lora) if features.lora is not None else OFF
    tensor = apply_tp(model, mesh)
    if features.offload_layers and mesh is not None and mesh.size() > 1:
        raise ValueError(
            f"ACTIVATION_OFFLOAD_LAYERS={features.offload_layers} is built for one GPU only "
            f"(this layout has {mesh.size()}); set it to 0"
        )
    checkpointed = apply_activation_checkpointing(
        model,
        features.activation_checkpointing,
        features.checkpoint_layers,
        features.keep_attention,
        features.offload_layers,
    )
    if features.fp8 is not None and features.fp8.mlp_activations_in_fp8:
        kept = sum(save_mlp_activations_in_fp8(block) for block in model.layers if not block.recompute)
        fp8.description += f", the SwiGLU inputs of {kept} MLPs kept for the backward in FP8"
    outside = features.fp8 is not None and features.fp8_eager_checkpoint
    compiled = apply_compile(model, features.compile, outside)
    reduce_dtype = torch.float32 if features.grad_reduce_in_fp32 else torch.bfloat16
    sharded = apply_fsdp(model, mesh, param_dtype, features.reshard_after_forward, reduce_dtype)
    laid_out = _fp8_for_layout(features.fp8, mesh)
    gather_fp8 = fp8.backend != "off" and laid_out is not None and laid_out.gather_in_fp8
    carried = collective_precision(mesh, param_dtype, reduce_dtype, gather_fp8)
    return Applied(pipeline, fp8, lora, tensor, checkpointed, compiled, sharded, collectives=carried)


def collective_precision(
    mesh: DeviceMesh | None, param_dtype: torch.dtype, reduce_dtype: torch.dtype, gather_in_fp8: bool
) -> str:
    """The lowest precision the collectives of this layout carry (MLPerf's name), "" for one process: FSDP2's
    all-gathers (the compute dtype, or FP8) and reduce-scatters (`reduce_dtype`); tensor-, context- and
    pipeline-parallel ranks exchange activations (and keys and values) in the compute dtype."""
    if mesh is None:
        return ""
    carried = []
    if _shard_ranks(mesh) > 1:
        carried += ["fp8" if gather_in_fp8 else dtype_name(param_dtype), dtype_name(reduce_dtype)]
    if any(mesh[dim].size() > 1 for dim in ("tp", "cp", "pp")):
        carried.append(dtype_name(param_dtype))
    return lowest(*carried) if carried else ""


def _shard_ranks(mesh: DeviceMesh | None) -> int:
    """How many ranks FSDP2 shards the parameters over (1: it does not): the data- and context-parallel
    ranks (pipeline stages hold their own blocks, tensor-parallel ranks their own slices)."""
    return 1 if mesh is None else mesh["dp"].size() * mesh["cp"].size()


def _fp8_for_layout(settings: Fp8Settings | None, mesh: DeviceMesh | None) -> Fp8Settings | None:
    """The FP8 settings this layout can take: FP8 all-gathers only where FSDP2 shards and tensor parallelism
    does not slice the weights, fused MLPs only without tensor parallelism (its row- and column-parallel
    halves are separate linears)."""
    if settings is None:
        return None
    tp = mesh is not None and mesh["tp"].size() > 1
    return dataclasses.replace(
        settings,
        gather_in_fp8=settings.gather_in_fp8 and _shard_ranks(mesh) > 1 and not tp,
        fuse_mlp=None if tp else settings.fuse_mlp,
    )


def transformer_blocks(model: nn.Module) -> nn.ModuleList:
    """The decoder blocks: ours (`model.layers`) or a Hugging Face Llama's (`model.model.layers`)."""
    return model.layers if hasattr(model, "layers") else model.model.layers


def build_mesh(device_type: str, dp: int, tp: int, cp: int = 1, pp: int = 1) -> DeviceMesh | None:
    """A (dp, pp, cp, tp) mesh over all ranks, tp varying fastest (rank = ((dp_rank x pp + pp_rank) x cp +
    cp_rank) x tp + tp_rank); None for a single process."""
    if dp * pp * cp * tp == 1:
        return None
    return init_device_mesh(device_type, (dp, pp, cp, tp), mesh_dim_names=("dp", "pp", "cp", "tp"))


def apply_pp(model: nn.Module, mesh: DeviceMesh | None) -> Change:
    """Keep this rank's pipeline stage only: an equal slice of the blocks, the embedding on the first stage,
    the final norm and output layer on the last (the others become None and the model passes hidden states).
    The schedule that runs the stages is built by the trainer (`pipeline_schedule`)."""
    if mesh is None or mesh["pp"].size() == 1:
        return OFF
    stage, stages = mesh["pp"].get_local_rank(), mesh["pp"].size()
    per = len(model.layers) // stages
    first = stage * per
    model.layers = nn.ModuleList(list(model.layers)[first : first + per])
    if stage > 0:
        model.embed_tokens = None
    if stage < stages - 1:
        model.norm, model.lm_head = None, None
    return Change(stages, f"stage {stage} of {stages} (blocks {first}-{first + per - 1}), 1F1B schedule")


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


def apply_tp(model: nn.Module, mesh: DeviceMesh | None) -> Change:
    """Megatron-style tensor parallelism through DTensor: q/k/v and gate/up column-wise, o/down row-wise,
    so each block does one all-reduce after attention and one after the MLP. Embeddings, norms and the
    output layer stay replicated across the TP group (sharded by FSDP over data parallelism)."""
    if mesh is None or mesh["tp"].size() == 1:
        return OFF
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
    ranks = mesh["tp"].size()
    return Change(ranks, f"DTensor TP over {ranks} ranks (attention heads and MLP columns)")


def apply_activation_checkpointing(
    model: nn.Module,
    enabled: bool,
    layers: int | None = None,
    keep_attention: bool = False,
    offload_layers: int = 0,
) -> Change:
    """Put each block in a `checkpointing.Checkpointed` wrapper (parameter names unchanged), which recomputes
    the block's forward in the backward, keeping only its input, when `enabled` (the first `layers` blocks
    only, when given: AMD's ACL). With `keep_attention` the recompute runs in two halves around the attention
    kernel, whose output stays from the forward: one attention forward less a block, for 0.13 GiB more a
    block of the 70B width at 8192 tokens where the block compiles whole (the compiler recomputes q, k, v for
    the kernel's backward) and 0.28 GiB where the halves compile inside eager checkpoints (FP8: q, k, v kept
    too). A block with dropout (LoRA's) saves the random number generators' state and restores it for the
    recompute, which then drops what the forward dropped (so: after `apply_lora`). The `offload_layers`
    blocks after the recomputed ones keep what their forward saves in host memory until their backward
    (`training.llama.offload`). Off, the blocks are wrapped too and run as they are: FP8's calibration
    recomputes them all through their wrappers."""
    count = 0 if not enabled else len(model.layers) if layers is None else min(layers, len(model.layers))
    offloaded = range(count, min(count + offload_layers, len(model.layers)))
    host = HostOffload() if offloaded else None
    for i, block in enumerate(model.layers):
        recompute = i < count
        model.layers[i] = Checkpointed(
            block,
            recompute,
            keep_attention=keep_attention and recompute,
            offload=host if i in offloaded else None,
            first=i == count,
            announce=host if offloaded and i == offloaded.stop else None,
        )
    moved = f"; the saved activations of {len(offloaded)} more in host memory" if offloaded else ""
    if not enabled:
        return Change(len(offloaded), moved.removeprefix("; ")) if offloaded else OFF
    what = "recompute but the attention kernel" if keep_attention else "full recompute"
    return Change(count, f"{what} of {count} of {len(model.layers)} blocks{moved}")


def apply_compile(model: nn.Module, enabled: bool, checkpoint_outside: bool = False) -> Change:
    """torch.compile each block in place (parameter names unchanged); the embedding and output layer stay
    eager. (The trainer then also takes `compiled_cross_entropy` for its loss.) With `checkpoint_outside`
    (FP8 on), a recomputed block compiles its parts only, inside the eager checkpoint
    (`Checkpointed.compile_inside`): compiled together with the checkpoint, the tensors our FP8 functions
    save for their backward were kept, not recomputed (Llama 2 70B LoRA blocks on an H200: 1.1 GiB more per
    block kept after the forward; `perf/RESULTS.md`). BF16 blocks keep the checkpoint inside the compiled
    graph, where it does recompute."""
    if not enabled:
        return OFF
    blocks = transformer_blocks(model)
    outside = offloaded = 0
    for block in blocks:
        if isinstance(block, Checkpointed) and (block.offload is not None or block.announce is not None):
            block.compile_inside()  # the offloading hooks stay outside the compiled parts
            offloaded += 1
        elif checkpoint_outside and isinstance(block, Checkpointed) and block.recompute:
            block.compile_inside()
            outside += 1
        else:
            block.compile()
    inside = f", {outside} of them inside their eager checkpoint (FP8)" if outside else ""
    inside += f", {offloaded} inside their eager offloading wrapper" if offloaded else ""
    what = f"torch.compile per block ({len(blocks)} blocks{inside}) and of the cross-entropy"
    return Change(len(blocks), what)


def apply_fsdp(
    model: nn.Module,
    mesh: DeviceMesh | None,
    param_dtype: torch.dtype,
    reshard_after_forward: bool = True,
    reduce_dtype: torch.dtype = torch.float32,
) -> Change:
    """FSDP2 `fully_shard` per block, then the root (embedding, final norm, output layer): parameters kept
    in float32 and sharded over the data-parallel ranks, gathered in `param_dtype` for compute, gradients
    reduce-scattered in `reduce_dtype` (float32, or bf16: half the bytes copied into the collective and
    sent, the sharded result still added in float32). The last block keeps its gathered weights for the
    backward that follows; with `reshard_after_forward=False` every block does (no second all-gather in
    backward, at the cost of all blocks' gathered weights in memory between forward and backward: 16 GB in
    bf16 for 8B)."""
    if _shard_ranks(mesh) == 1:
        return OFF
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
    ranks = shard_mesh.size()
    return Change(ranks, f"FSDP2 over {ranks} ranks ({name} compute params, {master}{kept})")


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
