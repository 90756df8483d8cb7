"""Per-step losses of a tiny seeded run against a golden file, so a change to the math (model, loss, AdamW,
schedule, clipping) is seen. Regenerate deliberately:
    LLAMA_GOLDEN_UPDATE=1 python -m pytest tests/llama/test_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from training.llama import optim, parallel
from training.llama.model import Llama, LlamaShape, cross_entropy

GOLDEN = Path(__file__).with_name("golden_losses.json")
SHAPE = LlamaShape(
    num_layers=2,
    hidden_size=64,
    ffn_hidden_size=128,
    num_heads=4,
    num_kv_heads=2,
    vocab_size=128,
    max_seq_length=64,
)


def run(steps: int = 6) -> list[float]:
    torch.manual_seed(0)
    model = Llama(SHAPE)
    model.init_weights()
    optimizer, _ = optim.build_optimizer(model, 3e-3, (0.9, 0.95), 1e-5, 0.1, fused=False)
    params = list(model.parameters())
    g = torch.Generator().manual_seed(1)
    # a learnable stream: each row counts up from a random start, modulo the vocabulary
    starts = torch.randint(0, SHAPE.vocab_size, (steps, 4, 1), generator=g)
    data = (starts + torch.arange(65)) % SHAPE.vocab_size
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = optim.cosine_with_warmup(step, 3e-3, 2, 1_200_000, 3e-4)
        loss = cross_entropy(model(data[step, :, :-1]), data[step, :, 1:])
        loss.backward()
        parallel.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 6))
    return losses


def test_losses_match_the_golden_file():
    losses = run()
    if os.environ.get("LLAMA_GOLDEN_UPDATE") == "1":
        GOLDEN.write_text(json.dumps({"losses": losses}, indent=1) + "\n")
    golden = json.loads(GOLDEN.read_text())["losses"]
    assert losses[-1] < losses[0]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(golden), rtol=2e-4, atol=2e-4)
