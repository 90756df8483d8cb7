"""Activation checkpointing of the Llama blocks as a wrapper module, as torchtitan's `apply_ac` wraps each
transformer block: `apply_activation_checkpointing` (in `parallel.py`, in the features' order) puts a
`Checkpointed` in each block's place in `model.layers`, which runs the block and, where asked, recomputes it
in the backward. The model itself knows nothing of it.

Two things differ from PyTorch's `checkpoint_wrapper`:
- the wrapper takes the block's children as its own instead of holding the block as a child, so every
  parameter keeps its name (`layers.3.self_attn.q_proj.weight`): a Hugging Face checkpoint loads by name,
  the from-scratch init draws by name, FSDP2 shards the same parameters;
- every block is wrapped, recomputed or not, so that FP8's calibration pass can recompute them all
  (`recompute_every_block`, which `training.fp8.calibrate` enters).

The wrapper is also where compile meets a recomputed block (`compile_inside`): the block's parts compiled
inside the eager checkpoint, not the checkpoint compiled with the block; and an offloaded block, whose
saved-tensor hooks stay outside its compiled parts.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from training.llama.offload import HostOffload


class Checkpointed(nn.Module):
    """A transformer block in the model's layers, recomputed in the backward when `recompute` is set (and
    gradients are on), keeping only its input. The block must offer its forward in parts around the
    attention kernel: `project(x, cos, sin) -> (q, k, v)`, its attention's `attend(q, k, v, cu_seqlens,
    max_seqlen)` and `after_attention(x, out)`. With `keep_attention` the recompute runs in two halves
    around the kernel, whose output stays from the forward (one attention forward less a block, for its
    output's memory). A block that draws random numbers (LoRA's dropout) has the generators' state saved and
    restored for the recompute (`random`), which then drops what the forward dropped. With `offload` (a
    block kept, not recomputed), what its forward saves goes to host memory until its backward
    (`training.llama.offload`); `first`: the first offloaded block of the model. `announce` (the block after
    the last offloaded one): its output's gradient starts the copies back of that block's tensors."""

    def __init__(
        self,
        block: nn.Module,
        recompute: bool = False,
        keep_attention: bool = False,
        offload: HostOffload | None = None,
        first: bool = False,
        announce: HostOffload | None = None,
    ):
        super().__init__()
        self._modules = block._modules  # the block's children are this module's: the same names
        self.__dict__["block"] = block  # called, not a child: its parameters would be listed twice
        self.recompute = recompute
        self.keep_attention = keep_attention
        self.offload, self.first_offloaded, self.announce = offload, first, announce
        self.random = any(isinstance(m, nn.Dropout) and m.p > 0 for m in block.modules())
        # the block's parts that run inside the checkpoint (compiled there by `compile_inside`)
        self.whole, self.project, self.after_attention = block.forward, block.project, block.after_attention
        self.compiled_inside = False

    def forward(self, x, cos, sin, cu_seqlens=None, max_seqlen=None):
        out = self._forward(x, cos, sin, cu_seqlens, max_seqlen)
        if self.announce is not None and out.requires_grad:
            out.register_hook(self.announce.prefetch_last)
        return out

    def _forward(self, x, cos, sin, cu_seqlens, max_seqlen):
        if not torch.is_grad_enabled():
            return self.whole(x, cos, sin, cu_seqlens, max_seqlen)
        if not self.recompute:  # (`recompute_every_block` recomputes an offloaded block too)
            if self.offload is None:
                return self.whole(x, cos, sin, cu_seqlens, max_seqlen)
            storages = {p.untyped_storage().data_ptr() for p in self.block.parameters()}
            with self.offload.saving(storages, self.first_offloaded):
                return self.whole(x, cos, sin, cu_seqlens, max_seqlen)
        recompute = functools.partial(checkpoint, use_reentrant=False, preserve_rng_state=self.random)
        if not self.keep_attention:
            return recompute(self.whole, x, cos, sin, cu_seqlens, max_seqlen)
        # two recomputed halves around the attention kernel, which saves its inputs and output as usual
        q, k, v = recompute(self.project, x, cos, sin)
        return recompute(self.after_attention, x, self.self_attn.attend(q, k, v, cu_seqlens, max_seqlen))

    def compile_inside(self) -> None:
        """torch.compile the block's parts, which then run compiled inside the eager checkpoint: what FP8
        blocks need (compiled together with the checkpoint, the tensors our FP8 functions save for their
        backward were kept, not recomputed: `parallel.apply_compile`)."""
        self.whole, self.project, self.after_attention = (
            torch.compile(part) for part in (self.whole, self.project, self.after_attention)
        )
        self.compiled_inside = True

    def train(self, mode: bool = True):
        self.block.training = mode  # (the block's own flag, beside its children's)
        return super().train(mode)


@contextlib.contextmanager
def recompute_every_block(model: nn.Module):
    """Within the context, every wrapped block of `model` is recomputed in the backward, its random numbers
    drawn again the same; each is set back after. FP8's calibration pass runs eagerly in bf16, where a kept
    block saves more than twice what its compiled FP8 forward does (`training.fp8.calibrate`)."""
    blocks = [m for m in model.modules() if isinstance(m, Checkpointed)]
    before = [(block.recompute, block.random) for block in blocks]
    try:
        for block in blocks:
            block.recompute, block.random = True, True
        yield
    finally:
        for block, (recompute, random) in zip(blocks, before):
            block.recompute, block.random = recompute, random
