"""perf/bench_llama.py's logic on CPU: 2 gloo ranks, a tiny model, ours and Hugging Face's under FSDP2."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.llama.helpers import ROOT, subprocess_env

pytest.importorskip("transformers")


def test_bench_tiny_runs_both_models_and_writes_json(tmp_path):
    """Both models with two micro-batches per optimizer step (`--accum 2`), recorded in the JSON."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(ROOT / "perf" / "bench_llama.py"),
        "--tiny",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--no-compile",
        "--accum",
        "2",
        "--variants",
        "ours-bf16,hf-bf16,ours-fp8,ours-bf16-keep",
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=subprocess_env(OUT=str(tmp_path)), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "bench_llama.json").read_text())
    ours, hf, keep = (result["runs"][v] for v in ("ours-bf16", "hf-bf16", "ours-bf16-keep"))
    assert (
        result["world_size"] == 2
        and result["accum"] == 2
        and "6 x N x seq + 6 x seq^2 x hidden x layers" in result["flops_formula"]
    )
    for r in (ours, hf, keep):
        assert r["tokens_per_s_per_gpu"] > 0 and r["model_tflops_per_gpu"] > 0
        assert 5.5 < r["first_loss"] < 7.0  # ~ln(512) from a random init on random tokens
    assert result["runs"]["ours-fp8"] == {"skipped": "FP8 needs a GPU"}
    table = proc.stdout.rstrip().splitlines()[-4:]  # the table comes last
    assert table[0].startswith("| ours-bf16 |") and table[-1].startswith("| ours-bf16-keep |")
    assert re.search(r"\| \d+\.\d\dx \| \d+\.\d\dx \|$", table[-1]), table[-1]  # vs HF bf16, twice
