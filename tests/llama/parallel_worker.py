"""Run by test_parallel.py under `torchrun --nproc_per_node=2` (gloo, CPU): a few training steps of a tiny
Llama through the trainer's own apply_tp / apply_fsdp / clip / optimizer, from the same full weights as the
single-process reference, writing per-step losses and the final full weights for comparison.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/llama/parallel_worker.py \
        DP TP ACCUM OUT
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from training.llama import optim, parallel  # noqa: E402
from training.llama.model import Llama, LlamaShape, cross_entropy  # noqa: E402

SHAPE = LlamaShape(
    num_layers=2,
    hidden_size=32,
    ffn_hidden_size=64,
    num_heads=4,
    num_kv_heads=2,
    vocab_size=128,
    max_seq_length=32,
)
GBS, SEQ, STEPS, LR = 8, 32, 3, 1e-2


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    data = torch.randint(0, SHAPE.vocab_size, (STEPS, GBS, SEQ + 1), generator=g)
    return [(d[:, :-1], d[:, 1:]) for d in data]


def full_model() -> Llama:
    torch.manual_seed(3)
    model = Llama(SHAPE)
    model.init_weights()
    return model


def train(model, rank_rows, accum: int, fsdp_sync=None) -> list[float]:
    """`rank_rows(tokens)` picks this rank's rows of a global batch; returns the global mean loss per step."""
    optimizer, _ = optim.build_optimizer(model, LR, (0.9, 0.95), 1e-5, 0.1, fused=False)
    params = [p for p in model.parameters()]
    losses = []
    for tokens, labels in batches():
        tokens, labels = rank_rows(tokens), rank_rows(labels)
        per_micro = tokens.shape[0] // accum
        total = torch.zeros(())
        for m in range(accum):
            if fsdp_sync is not None:
                fsdp_sync(m == accum - 1)
            rows = slice(m * per_micro, (m + 1) * per_micro)
            loss = cross_entropy(model(tokens[rows]), labels[rows])
            (loss / accum).backward()
            total += loss.detach() / accum
        parallel.clip_grad_norm_(params, 0.5)  # small enough to clip: exercises the sharded norm
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if dist.is_initialized():
            dist.all_reduce(total)
            total /= dist.get_world_size()
        losses.append(total.item())
    return losses


def main(dp: int, tp: int, accum: int, out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = parallel.build_mesh("cpu", dp, tp)
    model = full_model()
    reshard = os.environ.get("RESHARD_AFTER_FORWARD", "1") == "1"
    described = [parallel.apply_tp(model, mesh), parallel.apply_fsdp(model, mesh, torch.float32, reshard)]
    dp_rank = rank // tp

    def rows(t: torch.Tensor) -> torch.Tensor:
        share = t.shape[0] // dp
        return t[dp_rank * share : (dp_rank + 1) * share]

    sync = model.set_requires_gradient_sync if hasattr(model, "set_requires_gradient_sync") else None
    losses = train(model, rows, accum, sync)
    state = {}
    for name, p in model.named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        state[name] = full.detach().clone()
    if rank == 0:
        torch.save({"losses": losses, "state": state, "described": described}, out)
    dist.barrier()  # every rank done before the gloo group is torn down
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
