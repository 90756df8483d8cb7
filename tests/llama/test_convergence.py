"""The local convergence check's tiny form on the CPU: the 8B small default, shortened, 3 seeds each of the
plain reference and native FP8."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.llama.helpers import ROOT, subprocess_env


@pytest.mark.slow
def test_the_tiny_form_runs_both_modes_and_reports(tmp_path, demo_data):
    """The FP8 runs spend their time in the CPU's `torch._scaled_mm` (about 90 ms for a 256 x 64 x 192 GEMM on
    CI's 2 cores): the whole check ran under 15 minutes there, and over 15 on a machine running at half its
    usual speed."""
    out = tmp_path / "check"
    # a target the first evaluation (after 32 steps) reaches, with room for more before the sample limit:
    # a run is one block of steps and one small evaluation; the tool is under test here, not the curve
    short = [
        "SEQ_LENGTH=64",
        "EVAL_EVERY=256",
        "EVAL_SAMPLES=128",
        "TARGET=7.15",
        "MAX_SAMPLES_TERMINATION=1024",
    ]
    cmd = [
        sys.executable,
        "-m",
        "training.convergence",
        "llama31_8b",
        "--datadir",
        str(demo_data),
        "--seeds",
        "3",
        "--set",
        "PRECISION=fp8",
        "--set",
        "FP8_BACKEND=native",
        "--out",
        str(out),
    ]
    for item in short:
        cmd += ["--reduce", item]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=1800)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    summary = json.loads((out / "convergence.json").read_text())
    assert [r["mode"] for r in summary["runs"]] == ["reference", "mode"] * 3
    assert summary["mode"] == {"PRECISION": "fp8", "FP8_BACKEND": "native"}
    assert summary["reference"]["PRECISION"] == "fp32"
    assert all(r["converged"] for r in summary["runs"]), summary["runs"]
    assert summary["verdict"]["ok"] == (done.returncode == 0)
    assert (out / "convergence.png").stat().st_size > 0 and "verdict" in (out / "convergence.md").read_text()
    assert "[6/6] mode seed 3: converged" in done.stdout
