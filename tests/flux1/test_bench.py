"""`perf/bench_flux1.py` runs on the CPU at the toy shape: ours and diffusers' loop from the same weights and
draws agree step for step (fp32: the same arithmetic in the same order), and the table is printed."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.llama.helpers import ROOT, subprocess_env


def test_the_bench_runs_and_diffusers_loop_matches_ours(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "perf.bench_flux1",
        "--tiny",
        "--double",
        "1",
        "--single",
        "1",
        "--batch",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--set",
        "ACTIVATION_CHECKPOINTING=1",
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, timeout=300, env=subprocess_env(OUT=str(tmp_path))
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| ours |" in proc.stdout and "| diffusers |" in proc.stdout
    assert "diffusers' losses against ours: ok (0.00% max over 3 steps)" in proc.stdout
    record = json.loads((tmp_path / "bench_flux1.json").read_text())
    assert record["overrides"] == {"ACTIVATION_CHECKPOINTING": "1"}
    assert record["applied"]["activation_checkpointing"].startswith("full recompute")


def test_a_misspelt_setting_is_named_with_the_nearest():
    proc = subprocess.run(
        [sys.executable, "-m", "perf.bench_flux1", "--tiny", "--set", "COMPILE_DTI=1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env=subprocess_env(),
    )
    assert proc.returncode != 0
    assert "COMPILE_DTI: not a variable of this benchmark (did you mean COMPILE_DIT?)" in proc.stderr
