"""Activation offloading for the Llama blocks (`ACTIVATION_OFFLOAD_LAYERS`; NeMo's `CPU_OFFLOADING`
switches, which vendor configs set for several GPUs, stay theirs): what an offloaded block's forward saves
for its backward goes to pinned host memory while the forward moves on, and comes back while the block
after it runs its backward. The block neither keeps those tensors on the GPU (memory) nor recomputes them
(time); the copies run on a stream of their own, beside the compute.

How (`saved_tensors_hooks` around the block's forward, in its eager wrapper `checkpointing.Checkpointed`):
- pack: a saved tensor of at least `MIN_BYTES`, dense (its strides those of `empty_like`), and not
  a parameter's storage, is copied into a pinned host buffer on the copy stream, after the compute stream's
  work that made it; the GPU tensor is marked as used by that stream, so its memory is reused only once the
  copy is done. Others stay as they are. A tensor saved twice in one block is copied once.
- unpack: the first unpack of a block's tensors (its backward starting) starts the copies back of the
  offloaded block before it, which runs its backward next, and waits for its own, started the same way by
  the offloaded block after it. The last offloaded block's start when the gradient of the next block's
  output is ready (`prefetch_last`, a hook that block's wrapper sets), one block's backward ahead.
- A tensor brought back is let go after its last unpack (one per save: a backward that retains its graph
  for a second one is not supported).
- The pinned buffers are kept from step to step (pinning memory is slow) and handed out again once their
  copy back is queued: the copy stream runs in order, so a buffer's next copy out follows it.

Without a GPU (the tests) the same hooks copy into host tensors on the current stream: the numbers are the
same bit for bit, which is what the CPU tests check.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

MIN_BYTES = 1 << 20  # smaller saved tensors stay on the GPU: a copy's fixed cost outweighs them


@dataclass
class _Group:
    """One block's offloaded tensors of one forward, and the group saved before it (its backward's next)."""

    previous: _Group | None
    hosts: list[torch.Tensor] = field(default_factory=list)
    devices: list[torch.device] = field(default_factory=list)
    index: dict[tuple, int] = field(default_factory=dict)  # a saved tensor's identity -> its entry
    alive: list[torch.Tensor] = field(default_factory=list)  # the forward's saved tensors, until it ends
    uses: list[int] = field(default_factory=list)  # each entry's unpacks still to come
    back: list[torch.Tensor | None] | None = None  # the tensors brought back, once their copies are queued
    ready: torch.cuda.Event | None = None


@dataclass(frozen=True)
class _Saved:
    group: _Group
    entry: int


class HostOffload:
    """The offloaded blocks' shared state: the copy stream, the pinned buffers, the last group saved."""

    def __init__(self, min_bytes: int = MIN_BYTES):
        self.min_bytes = min_bytes
        self.stream: torch.cuda.Stream | None = None
        self.free: dict[tuple, list[torch.Tensor]] = {}  # pinned buffers by (shape, stride, dtype)
        self.last: _Group | None = None
        self.copied_bytes = 0  # host copies made, in bytes (its tests and the bench's log read it)

    @contextlib.contextmanager
    def saving(self, parameters: set[int], first: bool):
        """Offload what the forward inside saves for its backward; `parameters`: the data pointers of the
        block's parameters' storages (kept as they are); `first`: the first offloaded block of the model,
        whose group has none before it."""
        group = _Group(previous=None if first else self.last)
        self.last = group

        def pack(t: torch.Tensor):
            if not self._worth(t, parameters, self.min_bytes):
                return t
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.shape, t.stride(), t.dtype)
            if key not in group.index:
                group.alive.append(t)  # no other tensor takes its address (its key) in this forward
                group.index[key] = len(group.hosts)
                group.hosts.append(self._copy_out(t))
                group.devices.append(t.device)
                group.uses.append(0)
            group.uses[group.index[key]] += 1
            return _Saved(group, group.index[key])

        def unpack(saved):
            if not isinstance(saved, _Saved):
                return saved
            group = saved.group
            self._fetch(group)
            if group.previous is not None:
                self._fetch(group.previous)
            if group.ready is not None:
                torch.cuda.current_stream(group.devices[saved.entry]).wait_event(group.ready)
            t = group.back[saved.entry]
            group.uses[saved.entry] -= 1
            if not group.uses[saved.entry]:
                group.back[saved.entry] = None  # freed once its last reader is done
            return t

        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                yield
        finally:
            group.alive.clear()

    def prefetch_last(self, grad: torch.Tensor) -> None:
        """A gradient hook on the output of the block after the last offloaded one: start the copies back
        of that last block's tensors, which its backward, next but one, reads first."""
        if self.last is not None:
            self._fetch(self.last)

    @staticmethod
    def _worth(t: torch.Tensor, parameters: set[int], min_bytes: int) -> bool:
        if t.device.type == "meta" or t.numel() * t.element_size() < min_bytes:
            return False
        if t.untyped_storage().data_ptr() in parameters:
            return False
        return torch.empty_like(t, device="meta").stride() == t.stride()

    def _copy_out(self, t: torch.Tensor) -> torch.Tensor:
        key = (t.shape, t.stride(), t.dtype)
        pool = self.free.get(key)
        gpu = t.device.type == "cuda"
        host = pool.pop() if pool else torch.empty_like(t, device="cpu", pin_memory=gpu)
        self.copied_bytes += t.numel() * t.element_size()
        if not gpu:
            host.copy_(t)
            return host
        if self.stream is None:
            self.stream = torch.cuda.Stream(t.device)
        self.stream.wait_stream(torch.cuda.current_stream(t.device))
        with torch.cuda.stream(self.stream):
            host.copy_(t, non_blocking=True)
        t.record_stream(self.stream)
        return host

    def _fetch(self, group: _Group) -> None:
        """Queue the copies back of `group` (once), then hand its host buffers back to the pool."""
        if group.back is not None:
            return
        group.back = [torch.empty_like(host, device=d) for host, d in zip(group.hosts, group.devices)]
        gpu = [i for i, device in enumerate(group.devices) if device.type == "cuda"]
        for i, device in enumerate(group.devices):
            if device.type != "cuda":
                group.back[i].copy_(group.hosts[i])
        if gpu:
            device = group.devices[gpu[0]]
            self.stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(self.stream):
                for i in gpu:
                    group.back[i].copy_(group.hosts[i], non_blocking=True)
                group.ready = torch.cuda.Event()
                group.ready.record(self.stream)
            for i in gpu:
                group.back[i].record_stream(self.stream)
        for host in group.hosts:
            self.free.setdefault((host.shape, host.stride(), host.dtype), []).append(host)
        group.hosts = []
