"""Golden files for numerics: per-step losses and a digest of the final weights of tiny seeded runs through
the trainers' own step functions (`tests/*/test_golden.py`), so that a change to the math (model, loss,
optimizer, schedule, clipping, accumulation) is seen. `golden_steps.json` was written by the code before the
benchmark-interface refactor (issue #18), which the runs reproduce bit for bit. Regenerate deliberately, and
say why in the commit:
    GOLDEN_UPDATE=1 python -m pytest tests/llama/test_golden.py tests/bert/test_golden.py
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

GOLDEN = Path(__file__).with_name("golden_steps.json")


def digest(model: torch.nn.Module) -> str:
    """The first 16 hex digits of the sha256 of every state-dict tensor (as float32), by name."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def check_golden(benchmark: str, run: str, result: dict) -> None:
    golden = json.loads(GOLDEN.read_text())
    if os.environ.get("GOLDEN_UPDATE") == "1":
        golden[benchmark][run] = result
        GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")
    assert result == golden[benchmark][run]  # exact: the same bits
