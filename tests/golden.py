"""Golden files for numerics: per-step losses and a digest of the final weights of tiny seeded runs through
the trainers' own step functions (`tests/*/test_golden.py`), so that a change to the math (model, loss,
optimizer, schedule, clipping, accumulation) is seen: a refactor reproduces `golden_steps.json` bit for bit.
Regenerate deliberately, and say why in the commit:
    GOLDEN_UPDATE=1 python -m pytest tests/llama/test_golden.py tests/bert/test_golden.py
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

GOLDEN = Path(__file__).with_name("golden_steps.json")


def digest(model: torch.nn.Module) -> dict:
    """The final weights: the first 16 hex digits of the sha256 of every state-dict tensor (as float32), by
    name, under this CPU's vector capability (PyTorch's kernels round differently on AVX2 and AVX-512: on an
    AVX2 machine the losses matched the AVX-512 recording bit for bit and the weights' last bits did not), and
    the norm of each tensor, compared closely on any CPU."""
    h = hashlib.sha256()
    norms = []
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().float().contiguous().numpy().tobytes())
        norms.append(float(tensor.detach().double().norm()))
    return {"sha256": {torch.backends.cpu.get_cpu_capability(): h.hexdigest()[:16]}, "norms": norms}


def check_golden(benchmark: str, run: str, result: dict) -> None:
    """Losses exact; the weights exact where the file has this CPU's digest, else their norms within 1e-5."""
    golden = json.loads(GOLDEN.read_text())
    want = golden[benchmark][run]
    if os.environ.get("GOLDEN_UPDATE") == "1":
        old = want["weights"]["sha256"] if isinstance(want.get("weights"), dict) else {}
        sha = {**old, **result["weights"]["sha256"]}
        golden[benchmark][run] = want = {**result, "weights": {**result["weights"], "sha256": sha}}
        GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")
    assert result["losses"] == want["losses"]  # exact: the same bits
    (cpu, sha), *_ = result["weights"]["sha256"].items()
    if cpu in want["weights"]["sha256"]:
        assert sha == want["weights"]["sha256"][cpu]
    assert result["weights"]["norms"] == pytest.approx(want["weights"]["norms"], rel=1e-5)
