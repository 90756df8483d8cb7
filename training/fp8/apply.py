"""FP8 matmuls for the transformer blocks of any benchmark: choosing the backend, swapping the blocks' linear
layers (and, for our own backend, whole MLPs) and what the training loop then calls (`training.fp8` hands
these names on; `apply_fp8` is the entry)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from training.common.backends import importable
from training.common.config import FP8_BACKENDS as BACKENDS
from training.common.config import FP8_CASTS as CASTS
from training.common.config import FP8_RECIPES as RECIPES
from training.fp8 import casts, gather, native
from training.fp8.gather import store_shards_in_fp8
from training.fp8.native import Fp8Linear, FusedFp8MLP

# the settings' values, kept in `choices` for the config code; FSDP2's FP8 shards, kept in `gather`
__all__ = ["BACKENDS", "CASTS", "RECIPES", "store_shards_in_fp8"]


@dataclass(frozen=True)
class MlpLayout:
    """Which modules of a model are MLPs that the native backend runs as one FP8 function: instances of
    `module_type` whose linears are named `up`, `down` and, for a gated (SwiGLU) MLP, `gate`; without a gate
    the activation is GELU."""

    module_type: type
    up: str
    down: str
    gate: str | None = None


@dataclass(frozen=True)
class Fp8Settings:
    backend: str = "auto"  # BACKENDS
    recipe: str = "tensorwise"  # torchao's scaling recipe
    gather_in_fp8: bool = False  # FSDP2 (without TP) will shard the model: all-gather the weights in FP8
    fuse_mlp: MlpLayout | None = None  # native: run these MLPs as one FP8 function
    casts: str = "auto"  # native: CASTS
    # delayed scaling (native, te): the steps whose amaxes a cast's scale is chosen from, and how (AMAX_ALGOS:
    # most_recent, the last one, whatever the length; max, the largest). AMD's and NVIDIA's recipe: 4, most
    # recent.
    amax_history: int = 4
    amax_algo: str = "most_recent"
    # native, fused SwiGLU MLPs: those of blocks kept for their backward (not recomputed) keep their
    # activation's inputs for it in e4m3 (`save_mlp_activations_in_fp8`; the model's build applies it)
    mlp_activations_in_fp8: bool = False
    # native: the forward GEMMs with cuBLASLt's fast accumulation, the gradients' with promoted partial sums
    # (Transformer Engine's and torchao's FP8 GEMM settings); False: every GEMM promoted
    fast_accum: bool = False
    # the module-name prefixes of the transformer blocks whose linears run in FP8 (also after a dot: under a
    # wrapper's prefix); the Llama models' and BERT's blocks are `layers.N`, diffusers' FLUX's
    # `transformer_blocks.N` and `single_transformer_blocks.N`
    block_prefixes: tuple[str, ...] = ("layers.",)
    # linears inside those blocks that stay in the compute dtype, by a part of their name: FLUX's adaLN
    # modulations, whose input is one row per image (too few rows for the FP8 GEMM)
    skip_names: tuple[str, ...] = ()


@dataclass
class Fp8:
    """What FP8 needs from the training loop: a context around forward (Transformer Engine's autocast) and a
    hook to call whenever the weights change, once initialized and after each optimizer step (the weights'
    scales for FP8 all-gathers: torchao's precompute, `gather.precompute_weight_scales` for ours)."""

    backend: str = "off"
    description: str = "off"
    forward_context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    weights_changed: Callable[[nn.Module], None] = field(default=lambda model: None)

    @property
    def linear_precision(self) -> str:
        """The lowest precision the blocks' linear GEMMs run in, by MLPerf's name: "fp8" where FP8 was
        applied, "" where not (they compute in the compute dtype). `training.fp4.Fp4` says its recipe's."""
        return "fp8" if self.backend != "off" else ""


def choose_backend(requested: str) -> str:
    """The backend FP8_BACKEND=`requested` runs on this machine; ValueError naming why none can."""
    if requested == "native":
        arch = _rocm_arch()
        if arch.startswith("gfx94"):
            raise ValueError(
                f"FP8_BACKEND=native computes in the OCP FP8 formats (e4m3fn, e5m2), which this GPU ({arch}: "
                "MI300X / MI325X) does not multiply; use FP8_BACKEND=te or torchao"
            )
        return requested
    if requested == "auto":  # ours where the OCP FP8 formats run, else Transformer Engine, else torchao
        if not _rocm_arch().startswith("gfx94"):
            # the path measured and checked here: faster than torchao's float8 wherever both were measured
            # (BERT, Llama 3.1 8B, the throughput suite), its curves checked against bf16 references
            # (perf/curve_parity.py); Transformer Engine, though NGC and ROCm images ship it, has never run
            # on this project's GPUs (not installable there): one explicit FP8_BACKEND=te away
            return "native"
        if importable("transformer_engine"):  # MI300X / MI325X: their FNUZ formats, through AMD's TE
            return "te"
        if importable("torchao"):
            return "torchao"
        raise ValueError("FP8 needs Transformer Engine or torchao; neither is importable")
    module = {"te": "transformer_engine", "torchao": "torchao"}[requested]
    if not importable(module):
        raise ValueError(f"FP8_BACKEND={requested} but {module} is not importable")
    return requested


def backend_problems(precision: str, backend: str) -> list[str]:
    """The preflight's check: PRECISION=fp8 (resolved, FP8=1 folded in) needs FP8_BACKEND's backend here."""
    if precision != "fp8":
        return []
    try:
        choose_backend(backend)
    except ValueError as err:
        return [str(err)]
    return []


def auto_backend() -> str:
    """What FP8_BACKEND=auto picks on this machine (and why not Transformer Engine, where the image has it),
    or why none: for the doctor."""
    try:
        chosen = choose_backend("auto")
    except ValueError as err:
        return f"none ({err})"
    if chosen == "native" and importable("transformer_engine"):
        why = "has not run on this project's GPUs; native is the path measured and curve-checked"
        chosen += f" (Transformer Engine importable, but {why}: perf/RESULTS.md; FP8_BACKEND=te asks for it)"
    return chosen


def _rocm_arch() -> str:
    """The AMD GPU's architecture name (gfx942, gfx950, ...), or "" on other devices."""
    if torch.version.hip is None or not torch.cuda.is_available():
        return ""
    return torch.cuda.get_device_properties(0).gcnArchName


def _fp8_linear(
    module: nn.Module, fqn: str, prefixes: tuple[str, ...] = ("layers.",), skip: tuple[str, ...] = ()
) -> bool:
    """FP8 for the projections inside the transformer blocks (`layers.N...` by default, also under Hugging
    Face's `model.` prefix) only, not the output layer or heads (as NeMo's and NVIDIA's recipes), and only
    where both dimensions are multiples of 16 (the FP8 GEMM's requirement)."""
    in_block = any(fqn.startswith(p) or f".{p}" in fqn for p in prefixes)
    return (
        isinstance(module, nn.Linear)
        and in_block
        and not any(name in fqn for name in skip)
        and module.in_features % 16 == 0
        and module.out_features % 16 == 0
    )


def _swap_linears(
    model: nn.Module,
    make: Callable[[nn.Linear], nn.Module],
    prefixes: tuple[str, ...] = ("layers.",),
    skip: tuple[str, ...] = (),
) -> int:
    swapped = 0
    for fqn, module in list(model.named_modules()):
        for name, child in list(module.named_children()):
            if _fp8_linear(child, f"{fqn}.{name}" if fqn else name, prefixes, skip):
                setattr(module, name, make(child))
                swapped += 1
    return swapped


def _fuse_mlps(model: nn.Module, layout: MlpLayout) -> int:
    """Swap each `layout` MLP whose linears are all native FP8 ones for a `FusedFp8MLP` (same children)."""
    names = [n for n in (layout.up, layout.down, layout.gate) if n is not None]
    fused = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            linears = {n: getattr(child, n, None) for n in names}
            if isinstance(child, layout.module_type) and all(
                isinstance(m, Fp8Linear) for m in linears.values()
            ):
                setattr(parent, name, FusedFp8MLP(layout.up, layout.down, layout.gate, linears))
                fused += 1
    return fused


def store_weights_in_fp8(module: nn.Module) -> int:
    """Store the frozen weights of `module`'s native FP8 linears as e4m3 codes (`Fp8Linear.store_in_fp8`):
    half the memory of bf16 and no cast per forward, the same numbers. For a frozen base on one GPU (the
    whole Llama 2 70B LoRA model in 70 GB); under FSDP2, `store_shards_in_fp8`. Returns how many."""
    linears = [m for m in module.modules() if isinstance(m, Fp8Linear) and not m.stores_fp8]
    for linear in linears:
        linear.store_in_fp8()
    return len(linears)


def save_mlp_activations_in_fp8(module: nn.Module) -> int:
    """Have the fused SwiGLU MLPs in `module` keep their activation's inputs (the gate and up projections'
    outputs) for the backward as e4m3 codes scaled by their own amax instead of bf16
    (`FusedFp8MLP.saves_fp8`): half of what such an MLP keeps, 0.44 GiB of a Llama 2 70B block's 1.5 at
    8192 tokens, so more blocks fit unrecomputed. The backward computes from the codes' values (e4m3's 3
    mantissa bits, where the gradients it writes are e5m2's 2). For blocks kept for their backward: a
    recomputed block's saves are made again in the backward and dropped at once. With the Triton casts the
    backward kernel reads the codes; with PyTorch's a compiled block keeps the unpacked bf16 values instead
    (the compiler's partitioner moves the unpacking into the forward), so nothing is saved there. Returns
    how many MLPs."""
    mlps = [m for m in module.modules() if isinstance(m, FusedFp8MLP) and m.names[2] is not None]
    for mlp in mlps:
        mlp.saves_fp8 = True
    return len(mlps)


def reset_after_materialize(model: nn.Module) -> None:
    """After a meta-device model is materialized (`to_empty`): the native FP8 linears' amax buffers (to be
    measured again by `calibrate`)."""
    for module in model.modules():
        if isinstance(module, Fp8Linear):
            module.reset_amax()


def needs_calibration(model: nn.Module) -> bool:
    """Whether `model` has native FP8 linears whose scales were never measured (`calibrate`). Transformer
    Engine keeps its own scaling state and torchao scales from each tensor's current amax: neither needs
    it."""
    return any(isinstance(m, Fp8Linear) and not m.calibrated for m in model.modules())


def calibrate(
    model: nn.Module,
    forward_backward: Callable[[], object],
    recompute: contextlib.AbstractContextManager | None = None,
) -> bool:
    """Measure the native FP8 casts' scales before the first real update: run `forward_backward` (one step's
    forward and backward, on the batch the step will train on or on the warm-up's synthetic one) eagerly
    with every FP8 linear computing in bf16 and recording the amaxes of its input and of its incoming
    gradient (`native.calibrating`), then drop the gradients; the random number generators are restored, so
    dropout draws what it would have drawn without this pass. Without it, delayed scaling casts the first
    step with scale 1: on a 70B LoRA step the e5m2 gradients of the lower blocks underflow to zero and the
    first steps barely move (`tests/test_fp8.py` shows it on a toy model). A no-op (False) when
    nothing needs it.

    `recompute`: a context in which the model recomputes every block in the backward, drawing its random
    numbers again the same (a Llama's: `training.llama.checkpointing.recompute_every_block`), entered for
    this pass: eager and in bf16, a block kept for its backward saves more than twice what its compiled FP8
    forward does, and without it this one pass set the whole run's peak (Llama 2 70B LoRA on 4 x H200: 3.25
    GiB a kept block against 1.41 in the steps after, enough to run out of memory here at an ACL the steps
    fit)."""
    if not needs_calibration(model):
        return False
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    recompute = recompute or contextlib.nullcontext()
    try:
        with recompute, torch.compiler.set_stance("force_eager"), native.calibrating():
            forward_backward()
    finally:
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    model.zero_grad(set_to_none=True)
    for module in model.modules():
        if isinstance(module, Fp8Linear):
            module.calibrated = True
    return True


def apply_fp8(model: nn.Module, settings: Fp8Settings | None) -> Fp8:
    """Swap the blocks' linear layers for FP8 ones: Transformer Engine's (delayed scaling, HYBRID format,
    `settings.amax_history` and `amax_algo`: AMD's and NVIDIA's recipe is 4, most recent), torchao's float8
    training (dynamic `settings.recipe` scaling) or ours (`native`, delayed scaling with the same amax
    settings). None: FP8 off, nothing changed."""
    if settings is None:
        return Fp8()
    backend = choose_backend(settings.backend)
    if backend == "te":
        return _apply_te(model, settings)
    if backend == "native":
        return _apply_native(model, settings)
    return _apply_torchao(model, settings)


def amax_description(settings: Fp8Settings) -> str:
    """How delayed scaling picks each cast's amax, as FP8_AMAX_ALGO and FP8_AMAX_HISTORY say."""
    if settings.amax_algo == "max" and settings.amax_history > 1:
        return f"amax the max of the last {settings.amax_history} steps"
    return f"amax the most recent (history {settings.amax_history}, most_recent)"


def _apply_native(model: nn.Module, settings: Fp8Settings) -> Fp8:
    triton, casts_chosen = casts.choose_casts(settings.casts)
    # most_recent needs no history: the last step's amax is the one each cast keeps anyway
    history = settings.amax_history if settings.amax_algo == "max" and settings.amax_history > 1 else 0
    swapped = _swap_linears(
        model,
        lambda child: Fp8Linear.from_linear(child, triton, history, settings.fast_accum),
        settings.block_prefixes,
        settings.skip_names,
    )
    linears = [m for m in model.modules() if isinstance(m, Fp8Linear)]
    parts = [
        f"native FP8 (delayed scaling, e4m3 x e4m3, e5m2 gradients, {amax_description(settings)}, casts in "
        f"{casts_chosen}{', forward GEMMs with fast accumulation' if settings.fast_accum else ''})",
        f"{swapped} linear layers",
    ]
    if settings.gather_in_fp8:
        parts.append(f"FP8 all-gather of {gather.gather_weights_in_fp8(linears)} weights")
    if settings.fuse_mlp is not None:
        parts.append(f"{_fuse_mlps(model, settings.fuse_mlp)} MLPs fused")
    return Fp8("native", ", ".join(parts), weights_changed=gather.precompute_weight_scales)


def _apply_te(model: nn.Module, settings: Fp8Settings) -> Fp8:
    import transformer_engine.pytorch as te
    from transformer_engine.common.recipe import DelayedScaling, Format

    def te_linear(child: nn.Linear) -> nn.Module:
        new = te.Linear(
            child.in_features,
            child.out_features,
            bias=child.bias is not None,
            params_dtype=child.weight.dtype,
            device=child.weight.device,
        )
        if child.weight.device.type != "meta":
            with torch.no_grad():
                new.weight.copy_(child.weight)
                if child.bias is not None:  # BERT's linears have biases (a checkpoint's too)
                    new.bias.copy_(child.bias)
        return new

    swapped = _swap_linears(model, te_linear, settings.block_prefixes, settings.skip_names)
    recipe = DelayedScaling(
        fp8_format=Format.HYBRID, amax_history_len=settings.amax_history, amax_compute_algo=settings.amax_algo
    )
    return Fp8(
        "te",
        f"transformer_engine delayed scaling HYBRID, amax history {settings.amax_history} "
        f"{settings.amax_algo}, {swapped} linear layers",
        lambda: te.fp8_autocast(enabled=True, fp8_recipe=recipe),
    )


def _apply_torchao(model: nn.Module, settings: Fp8Settings) -> Fp8:
    from torchao.float8 import (
        Float8LinearConfig,
        convert_to_float8_training,
        precompute_float8_dynamic_scale_for_fsdp,
    )

    if settings.recipe == "tensorwise":
        config = Float8LinearConfig(enable_fsdp_float8_all_gather=settings.gather_in_fp8)
    else:
        config = Float8LinearConfig.from_recipe_name(settings.recipe)
    convert_to_float8_training(
        model,
        config=config,
        module_filter_fn=lambda module, fqn: _fp8_linear(
            module, fqn, settings.block_prefixes, settings.skip_names
        ),
    )
    swapped = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
    precompute = settings.recipe == "tensorwise" and settings.gather_in_fp8

    def after_step(m: nn.Module) -> None:
        if precompute:
            precompute_float8_dynamic_scale_for_fsdp(m)

    gathered = ", FP8 all-gather" if precompute else ""
    # torchao scales each cast by its tensor's current amax: no history to choose from
    return Fp8(
        "torchao",
        f"torchao float8 {settings.recipe}{gathered}, {swapped} linear layers (dynamic scaling: "
        f"FP8_AMAX_HISTORY={settings.amax_history} and FP8_AMAX_ALGO={settings.amax_algo} do not apply)",
        weights_changed=after_step,
    )
