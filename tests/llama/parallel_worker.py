"""Run by test_parallel.py under `torchrun --nproc_per_node=2` (gloo, CPU): a few training steps of a tiny
Llama through the trainer's own features (`parallel.apply_features`) and step (`step.train_step`), from the
same full weights as the single-process reference, writing per-step losses and the final full weights for
comparison.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/llama/parallel_worker.py \
        DP TP ACCUM OUT [PP]

With PP > 1 the steps run through the trainer's pipeline schedule, and the worker also evaluates VALIDATION
through it (the trainer's `evaluate`); every rank writes its stage's weights under their full names. With
FP8_BACKEND set, the blocks' linears are FP8 ones (FP8_PARAM_GATHER=1: FSDP2 all-gathers them in FP8); with
TP the worker then runs its first MLP forward and backward (`mlp_gradients`) instead of training.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.llama.helpers import tiny  # noqa: E402
from training.common.outcome import exit_process  # noqa: E402
from training.fp8 import Fp8, Fp8Settings  # noqa: E402
from training.llama import optim, parallel  # noqa: E402
from training.llama.model import Llama  # noqa: E402
from training.llama.parallel import Parallelism  # noqa: E402
from training.llama.step import Step, evaluate, train_step  # noqa: E402

SHAPE = tiny(hidden_size=32, ffn_hidden_size=64, vocab_size=128)
GBS, SEQ, STEPS, LR = 8, 32, 3, 1e-2


VALIDATION = torch.randint(0, SHAPE.vocab_size, (5, SEQ + 1), generator=torch.Generator().manual_seed(11))


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    data = torch.randint(0, SHAPE.vocab_size, (STEPS, GBS, SEQ + 1), generator=g)
    return [(d[:, :-1], d[:, 1:]) for d in data]


def full_model() -> Llama:
    torch.manual_seed(3)
    model = Llama(SHAPE)
    model.init_weights()
    return model


def train(model, rank_rows, layout: Parallelism, mesh=None, fp8: Fp8 | None = None) -> list[float]:
    """The trainer's step (`training.llama.step.train_step`) over `batches()`; `rank_rows(tokens)` picks this
    rank's rows of a global batch. Returns the global mean loss per step."""
    optimizer, _ = optim.build_optimizer(model, LR, (0.9, 0.95), 1e-5, 0.1, fused=False)
    fp8 = fp8 or Fp8()
    fp8.weights_changed(model)
    # clip at 0.5: small enough to clip, which exercises the sharded norm
    step = Step(
        model,
        optimizer,
        layout,
        torch.device("cpu"),
        mesh,
        fp8=fp8,
        clip_norm=0.5,
        sync_each_micro_batch=os.environ.get("REDUCE_EACH_MICRO_BATCH") == "1",
    )
    losses = []
    for tokens, labels in batches():
        tokens, labels = rank_rows(tokens), rank_rows(labels)
        per, accum = tokens.shape[0] // layout.grad_accum, layout.grad_accum
        micro = [(tokens[m * per : (m + 1) * per], labels[m * per : (m + 1) * per]) for m in range(accum)]
        losses.append(train_step(step, micro, LR)[0].item())
    return losses


def single_process(accum: int) -> Parallelism:
    return Parallelism(1, 1, 1, 1, 1, accum)


def evaluate_single(model) -> float:
    """The validation loss of `model` in one process (4 sequences per forward)."""
    return evaluate(Step(model, None, single_process(1), torch.device("cpu")), VALIDATION, 0, 4)


def mlp_gradients(model) -> dict[str, torch.Tensor]:
    """The first block's MLP alone (column-parallel gate/up, row-parallel down under TP; no residual path to
    hide its input gradient) on fixed inputs, forward and backward twice (FP8's delayed scaling casts the
    first backward's gradients with scale 1, which flushes the smallest to zero): the second's output, input
    gradient and full weight gradients."""
    mlp = model.layers[0].mlp
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(64, SHAPE.hidden_size, generator=gen).requires_grad_()
    g = torch.randn(64, SHAPE.hidden_size, generator=gen)
    for _ in range(2):
        x.grad = None
        mlp.zero_grad(set_to_none=True)
        y = mlp(x)
        y.backward(g)
    grads = {
        n: p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        for n, p in mlp.named_parameters()
    }
    # clone(): the row-parallel output comes back as an async collective's tensor, which waits on any op
    return {name: t.detach().clone() for name, t in {"y": y, "dx": x.grad, **grads}.items()}


def main(dp: int, tp: int, accum: int, out: Path, pp: int = 1) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = parallel.build_mesh("cpu", dp, tp, pp=pp)
    model = full_model()
    backend = os.environ.get("FP8_BACKEND")
    gather = os.environ.get("FP8_PARAM_GATHER") == "1"
    features = parallel.Features(
        fp8=Fp8Settings(backend, gather_in_fp8=gather) if backend else None,
        grad_reduce_in_fp32=os.environ.get("GRAD_REDUCE_IN_FP32") != "0",
        reshard_after_forward=os.environ.get("RESHARD_AFTER_FORWARD", "1") == "1",
    )
    applied = parallel.apply_features(model, mesh, features, torch.float32)
    fp8_hooks = applied.fp8
    layout = Parallelism(dist.get_world_size(), tp, pp, 1, dp, accum)
    dp_rank = rank // (tp * pp)

    def rows(t: torch.Tensor) -> torch.Tensor:
        share = t.shape[0] // dp
        return t[dp_rank * share : (dp_rank + 1) * share]

    described = [applied.lines()[k] for k in ("pipeline_parallel", "tensor_parallel", "data_parallel", "fp8")]
    result = {"described": described}
    if backend and tp > 1:
        result["mlp"] = mlp_gradients(model)
        if rank == 0:
            torch.save(result, out)
        dist.barrier()
        dist.destroy_process_group()
        return
    result["losses"] = train(model, rows, layout, mesh, fp8_hooks)
    first = 0
    if pp > 1:
        eval_step = Step(model, None, layout, torch.device("cpu"), mesh, fp8=fp8_hooks)
        result["eval"] = evaluate(eval_step, VALIDATION, dp_rank, GBS // (dp * accum))
        first = mesh["pp"].get_local_rank() * (SHAPE.num_layers // pp)
    state = {}
    for name, p in model.named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        if name.startswith("layers."):  # a pipeline stage numbers its blocks from 0
            index, rest = name.split(".", 2)[1:]
            name = f"layers.{int(index) + first}.{rest}"
        state[name] = full.detach().clone()
    result["state"] = state
    if rank == 0 or pp > 1:  # a pipeline's stages hold different weights: each writes its own
        torch.save(result, out.with_name(f"{out.name}.{rank}") if pp > 1 else out)
    dist.barrier()  # every rank done before the gloo group is torn down
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), *map(int, sys.argv[5:]))
    # Results are written and every rank has passed the barrier. Skip the interpreter's teardown: gloo's
    # worker threads can still be joinable then, and on a loaded 2-core CI machine one rank once aborted
    # there ("terminate called without an active exception"), failing a run whose results were complete.
    exit_process(0)
