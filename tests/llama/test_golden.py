"""The Llama trainers' step (`training.llama.step.train_step`) on a tiny seeded run, against the golden file
(`tests/golden.py`)."""

from __future__ import annotations

import pytest
import torch

from tests.golden import check_golden, digest
from tests.llama.helpers import tiny
from training.llama import optim
from training.llama.model import Llama
from training.llama.parallel import Parallelism
from training.llama.step import Step, train_step

SHAPE = tiny(vocab_size=128, max_seq_length=64)


@pytest.mark.parametrize("accum", [1, 2])
def test_llama_train_step_matches_the_golden_file(accum):
    torch.manual_seed(0)
    model = Llama(SHAPE)
    model.init_weights()
    optimizer, _ = optim.build_optimizer(model, 3e-3, (0.9, 0.95), 1e-5, 0.1, fused=False)
    step = Step(model, optimizer, Parallelism(1, 1, 1, 1, 1, accum), torch.device("cpu"))
    steps, rows = 6, 4
    g = torch.Generator().manual_seed(1)
    # a learnable stream: each row counts up from a random start, modulo the vocabulary
    starts = torch.randint(0, SHAPE.vocab_size, (steps, rows, 1), generator=g)
    data = (starts + torch.arange(SHAPE.max_seq_length + 1)) % SHAPE.vocab_size
    losses = []
    for i in range(steps):
        per = rows // accum
        micro = [
            (data[i, m * per : (m + 1) * per, :-1], data[i, m * per : (m + 1) * per, 1:])
            for m in range(accum)
        ]
        loss, _ = train_step(step, micro, optim.cosine_with_warmup(i, 3e-3, 2, 1_200_000, 3e-4))
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    check_golden("llama", f"accum{accum}", {"losses": losses, "weights": digest(model)})
