"""Every entry point answers --help (the trainers with their variables, defaults and help texts), and a
trainer given a stray argument names it instead of training."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from training.benchmarks import BENCHMARKS

ROOT = Path(__file__).resolve().parents[1]
TOOLS = [
    "training.preflight",
    "training.doctor",
    "training.benchmarks",
    "training.scoring",
    "training.scoring.compliance",
    "training.common.outcome",
    "training.prepare_hint",
]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("module", TOOLS)
def test_tools_answer_help(module):
    result = run(module, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_trainers_list_their_variables(name):
    result = run(BENCHMARKS[name].entry, "--help")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Variables (read from the environment):" in out
    assert "  PRECISION: default auto; auto (bf16 on GPUs" in out
    assert "  FP8: default None; NVIDIA's and AMD's name: FP8=1 is PRECISION=fp8" in out
    assert "  DATADIR: required" in out
    stray = run(BENCHMARKS[name].entry, "--batch-size", "4")
    assert stray.returncode == 2 and "unexpected arguments --batch-size 4" in stray.stderr
