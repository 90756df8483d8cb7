"""Helpers shared by the Llama tests."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from training.llama.model import LlamaShape

ROOT = Path(__file__).resolve().parents[2]
# the Llama tests' toy shape (2 blocks, hidden 64, GQA 4 / 2 heads); each test changes what it needs
TINY = LlamaShape(
    num_layers=2,
    hidden_size=64,
    ffn_hidden_size=128,
    num_heads=4,
    num_kv_heads=2,
    vocab_size=256,
    max_seq_length=32,
)


def tiny(**changes) -> LlamaShape:
    """`TINY` with `changes` (None values too: `rope_scaling=None` is Llama 2's RoPE)."""
    return dataclasses.replace(TINY, **changes)


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a trainer subprocess: no inherited torchrun variables, one CPU thread."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))
    }
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}, **extra)
    return env


def no_fp8_backend(monkeypatch) -> None:
    """An MI300-class GPU (FNUZ formats only) without Transformer Engine or torchao: FP8_BACKEND=auto finds
    nothing."""
    import training.fp8.apply as fp8_module

    monkeypatch.setattr(fp8_module, "importable", lambda module: False)
    monkeypatch.setattr(fp8_module, "_rocm_arch", lambda: "gfx942")
