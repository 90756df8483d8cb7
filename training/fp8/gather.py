"""FSDP2 all-gathers of the native FP8 linears' weights in FP8 (`FP8_PARAM_GATHER`, as Megatron's
`fp8_param_gather` and torchao's FP8 all-gather): ranks exchange 1 byte per element instead of bf16's 2, and
no rank casts the gathered weight again (+1.0% to +1.4% per Llama 8B step on 2 x H200, 6 GiB less resharded:
`perf/RESULTS.md`). Frozen weights may keep their shards as the e4m3 codes themselves (`store_shards_in_fp8`,
FP8_WEIGHTS under FSDP2: LoRA's base).

A module takes part when it has `gathers_fp8 = True` (set here), a `w_scale` buffer and `triton` (its casts);
this file knows no module class, so that the FP8 layers can import it.
"""

from __future__ import annotations

import sys

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from training.fp8.casts import E4M3_MAX, cast, kernels, scale_of

_ONES: dict[torch.device, torch.Tensor] = {}  # the scale of a plain copy, per device


def unpack(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the e4m3 weight and of its transposed copy that an FP8 all-gather wrote into the first bytes
    of the (out, in) tensor FSDP2 hands the module as its weight (`_Fp8GatheredWeight`)."""
    n, (rows, cols) = w.numel(), w.shape
    codes = w.view(torch.uint8).view(-1)
    w8, w8t = codes[:n].view(torch.float8_e4m3fn), codes[n : 2 * n].view(torch.float8_e4m3fn)
    return w8.view(rows, cols), w8t.view(cols, rows)


class _Fp8GatheredWeight(torch.Tensor):
    """A native FP8 linear's weight under FSDP2 that is all-gathered in FP8. Its shard is the plain tensor
    (the float32 master copy) for everything but FSDP2's all-gather: initialization, the optimizer and the
    clip see its data. FSDP2 calls `fsdp_pre_all_gather`, which casts the shard to e4m3 with the scale of the
    whole weight's amax (`precompute_weight_scales`, after each optimizer step); then `fsdp_post_all_gather`
    writes the gathered codes, row-major and transposed (what the forward's and the input gradient's GEMMs
    take), into the bytes of the (out, in) bf16 tensor that FSDP2 gives the module as its weight (`unpack`:
    the GEMMs read views; its gradient is a plain bf16 one, reduce-scattered as any other).

    A frozen weight's shard may hold its e4m3 codes instead (`store_shards_in_fp8`: LoRA's base under FSDP2,
    half the memory of bf16 shards and no cast before each all-gather): the codes are all-gathered as they
    are, and the gathered codes are the module's weight, an e4m3 (out, in) tensor, as a weight stored in FP8
    on one GPU (`Fp8Linear.store_in_fp8`: the backward makes the transposed copy it needs)."""

    # ops whose results stay this subclass (FSDP2's sharding, padding and `to_empty`; nn.Parameter's detach);
    # any other op computes on the plain data and returns plain tensors
    _KEEP = {
        torch.ops.aten.detach.default,
        torch.ops.aten.alias.default,
        torch.ops.aten.empty_like.default,
        torch.ops.aten.new_zeros.default,
        torch.ops.aten.new_empty.default,
        torch.ops.aten.slice.Tensor,
        torch.ops.aten.split.Tensor,
        torch.ops.aten.view.default,
        torch.ops.aten.as_strided.default,
        torch.ops.aten.copy_.default,
        torch.ops.aten.clone.default,
        torch.ops.aten._to_copy.default,
    }

    @staticmethod
    def __new__(cls, data: torch.Tensor, triton: bool = False):
        return torch.Tensor._make_wrapper_subclass(
            cls,
            data.shape,
            strides=data.stride(),
            storage_offset=data.storage_offset(),
            dtype=data.dtype,
            device=data.device,
            requires_grad=data.requires_grad,
        )

    def __init__(self, data: torch.Tensor, triton: bool = False):
        self._data, self._triton = data, triton

    def __repr__(self) -> str:
        return f"_Fp8GatheredWeight({self._data!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_map, tree_map_only

        triton = next((a._triton for a in args if isinstance(a, cls)), False)

        def plain(t):
            return t._data if isinstance(t, cls) else t

        out = func(*tree_map(plain, args), **tree_map(plain, kwargs or {}))
        if func not in cls._KEEP:
            return out
        return tree_map_only(torch.Tensor, lambda t: cls(t, triton), out)

    def fsdp_pre_all_gather(self, mesh, outer_size, outer_stride, module, mp_policy):
        if not module.w_scale_ready:
            raise RuntimeError(
                "an FP8 all-gather before the weights' scales were computed: call the Fp8 hook "
                "`weights_changed(model)` once the weights are initialized (and after each optimizer step)"
            )
        rows = -(-outer_size[0] // mesh.size())  # FSDP2 pads the last ranks' shards to this many rows
        shard, n = self._data, self._data.shape[0]
        if self.stored and n == rows:  # (FSDP2 copies it into its all-gather buffer)
            return (shard,), outer_size[0]
        codes = torch.empty((rows, shard.shape[1]), dtype=torch.float8_e4m3fn, device=shard.device)
        codes[n:].view(torch.uint8).zero_()
        if n and self.stored:
            codes[:n].copy_(shard)
        elif n and self._triton and shard.is_cuda:  # the cast alone, no transposed copy
            kernels.launch(shard, module.w_scale, codes[:n], None, module.w_scale, False, eager=True)
        elif n:
            codes[:n] = cast(shard, module.w_scale, codes.dtype)
        return (codes,), outer_size[0]

    @property
    def stored(self) -> bool:
        """Its shard holds e4m3 codes (`store_shards_in_fp8`), not the weight's values."""
        return self._data.dtype == torch.float8_e4m3fn

    @torch.no_grad()
    def fsdp_post_all_gather(self, outputs, rows, param_dtype, *, out=None):
        (gathered,) = outputs
        codes = gathered[:rows]
        if self.stored:  # the gathered codes are the weight: FSDP2 gathers into the same buffer each time
            return None if out is not None else (codes, (gathered,))
        weight = torch.empty(codes.shape, dtype=param_dtype, device=codes.device) if out is None else out
        if weight.element_size() < 2:
            raise ValueError(f"an FP8 all-gather into {param_dtype} weights (2 bytes or more needed)")
        with torch.autograd._unsafe_preserve_version_counter(weight):  # autograd saved its views
            w8, w8t = unpack(weight)
            if self._triton and codes.is_cuda:  # a copy and a transposed copy, one pass
                one = _ONES.get(codes.device)
                if one is None:
                    one = _ONES[codes.device] = torch.ones((), device=codes.device)
                kernels.launch(codes, one, w8, w8t, one, False, eager=True)
            else:
                w8.copy_(codes)
                w8t.copy_(codes.t())
        return None if out is not None else (weight, (weight,))


def local_data(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor under a DTensor (its local shard), under an `_Fp8GatheredWeight` and under torchao's
    FP8 all-gather wrapper (`WeightWithDynamicFloat8CastTensor`, its `_tensor`: a wrapper subclass has no
    storage of its own, `data_ptr()` 0, and a Triton kernel handed it reads address 0: an illegal memory
    access under FSDP2 with torchao's FP8 all-gather)."""
    if isinstance(t, DTensor):
        t = t._local_tensor
    if isinstance(t, _Fp8GatheredWeight):
        return t._data
    torchao = sys.modules.get("torchao.float8.fsdp_utils")  # (not imported: no such tensor exists)
    return t._tensor if torchao and isinstance(t, torchao.WeightWithDynamicFloat8CastTensor) else t


def gather_weights_in_fp8(modules: list[nn.Module]) -> int:
    """Before FSDP2's `fully_shard` (and without tensor parallelism): make these FP8 linears' weights
    all-gathered in FP8 (`_Fp8GatheredWeight`, scaled by a new `w_scale` buffer that
    `precompute_weight_scales` sets). Returns how many."""
    for module in modules:
        w = module.weight
        data = _Fp8GatheredWeight(w.detach(), module.triton)
        module.weight = nn.Parameter(data, requires_grad=w.requires_grad)
        module.register_buffer("w_scale", torch.ones((), device=w.device), persistent=False)
        module.gathers_fp8, module.w_scale_ready = True, False
    return len(modules)


@torch.no_grad()
def precompute_weight_scales(model: nn.Module) -> None:
    """The scales FP8 all-gathers cast the weights' shards with (`_Fp8GatheredWeight`): each weight's max |w|
    over all its shards, from one fused norm and one all-reduce for the whole model. Run once the weights
    are set (initialized, then after each optimizer step) while they are sharded.

    A frozen weight's shard (LoRA's base) is measured again only when it was written since (a version
    counter moved, the parameter's or its plain shard's: a checkpoint's `copy_`; optimizers write only
    trainable weights, some through Triton, which moves no counter): the norm read the 70B base's 34.5 GB
    a rank (4 GPUs) after every LoRA step to find the same scales again. The all-reduce still takes every
    weight's amax, so each rank may skip its own shards on its own."""
    # (shards stored as e4m3 codes keep the scale they were stored with: `store_shards_in_fp8`)
    modules = [m for m in model.modules() if getattr(m, "gathers_fp8", False) and not _stored(m.weight)]
    if not modules:
        return
    weights = [m.weight for m in modules]
    if not all(isinstance(w, DTensor) for w in weights):
        raise RuntimeError(
            "precompute_weight_scales runs on FSDP2-sharded weights (after fully_shard, resharded)"
        )
    shards = list(map(local_data, weights))
    # a write through the parameter moves its own counter, one to the plain shard that shard's (not both)
    seen = [(s.data_ptr(), w._version, s._version) for w, s in zip(weights, shards)]
    stale = [
        i
        for i, (m, w) in enumerate(zip(modules, weights))
        if w.requires_grad or getattr(m, "w_amax_of", None) != seen[i]
    ]
    if stale:
        # (a rank's shard may be empty, which has no infinity norm: a 0 stands in)
        parts = [shards[i] if shards[i].numel() else shards[i].new_zeros(1) for i in stale]
        found = torch._foreach_norm(parts, float("inf"))
        for i, amax in zip(stale, found):
            modules[i].w_local_amax, modules[i].w_amax_of = amax.float(), seen[i]
    amax = torch.stack([m.w_local_amax for m in modules])
    torch.distributed.all_reduce(
        amax, torch.distributed.ReduceOp.MAX, group=weights[0].device_mesh.get_group()
    )
    torch._foreach_copy_([m.w_scale for m in modules], list(scale_of(amax, E4M3_MAX).unbind()))
    for m in modules:
        m.w_scale_ready = True


def _stored(w: torch.Tensor) -> bool:
    local = w._local_tensor if isinstance(w, DTensor) else w
    return isinstance(local, _Fp8GatheredWeight) and local.stored


@torch.no_grad()
def store_shards_in_fp8(model: nn.Module) -> int:
    """Once the FSDP2-sharded model is materialized, before its first forward: each frozen weight that is
    all-gathered in FP8 (`gather_weights_in_fp8`) gets its shard replaced by the shard's e4m3 codes, cast
    with the scale of the whole weight's amax (`precompute_weight_scales`), the scale its all-gathers cast
    with: the same codes, so the same numbers, with half of bf16's memory for the shards, no cast before
    each all-gather and no copy after it (`_Fp8GatheredWeight`). FSDP2 takes the new shards in its lazy
    initialization (`reset_sharded_param`, there for parameters changed after `fully_shard`), which also
    lets go of the bf16 ones. Returns how many."""
    precompute_weight_scales(model)
    stored = 0
    for module in model.modules():
        w = getattr(module, "weight", None)
        if not getattr(module, "gathers_fp8", False) or w.requires_grad or _stored(w):
            continue
        codes = cast(local_data(w), module.w_scale, torch.float8_e4m3fn)
        local = _Fp8GatheredWeight(codes, module.triton)
        sharded = DTensor.from_local(
            local, w.device_mesh, w.placements, run_check=False, shape=w.shape, stride=w.stride()
        )
        module.weight = nn.Parameter(sharded, requires_grad=False)
        stored += 1
    return stored
