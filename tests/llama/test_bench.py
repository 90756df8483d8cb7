"""perf/bench_llama.py's logic on CPU: 2 gloo ranks, a tiny model, ours and Hugging Face's under FSDP2, each
variant's losses checked against the reference's (`perf/lib/parity.py`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.llama.helpers import subprocess_env

pytest.importorskip("transformers")


def test_bench_tiny_runs_both_models_and_writes_json(tmp_path):
    """Both models with two micro-batches per optimizer step (`--accum 2`), recorded in the JSON."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "perf.bench_llama",
        "--tiny",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--accum",
        "2",
        "--peer",
        "hf-bf16:",
        "--variant",
        "ours-bf16:; ours-fp8: PRECISION=fp8 FP8_BACKEND=torchao; native: PRECISION=fp8 FP8_BACKEND=native",
        "--variant",
        "keep: RESHARD_AFTER_FORWARD=0; each: REDUCE_EACH_MICRO_BATCH=1",
        "--profile",
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=subprocess_env(OUT=str(tmp_path)), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "bench_llama.json").read_text())
    ours, hf, keep, each = (result["runs"][v] for v in ("ours-bf16", "hf-bf16", "keep", "each"))
    assert (
        result["world_size"] == 2
        and result["accum"] == 2
        and "6 x N x seq + 6 x seq^2 x hidden x layers" in result["flops_formula"]
    )
    for r in (ours, hf, keep, each):
        assert r["tokens_per_s_per_gpu"] > 0 and r["model_tflops_per_gpu"] > 0
        assert 5.5 < r["first_loss"] < 7.0  # ~ln(512) from a random init on random tokens
        assert r["first_loss"] == pytest.approx(hf["first_loss"], rel=1e-5)  # the same weights and batch
        assert r["parity"]["ok"] and len(r["losses"]) == 1 + 1 + 2 + 2  # compile, warm-up, timed, profiled
    assert ours["attention"] == hf["attention"] == "sdpa"  # (ATTENTION=auto picks SDPA on the CPU)
    assert each["losses"] == pytest.approx(ours["losses"], rel=1e-5)  # a reduction per micro-batch: same
    assert result["runs"]["ours-fp8"]["skipped"] == "torchao's FP8 needs a GPU"
    assert result["runs"]["native"]["parity"]["tolerance"] == 0.05  # FP8's, from the run's settings
    assert keep["overrides"] == {"RESHARD_AFTER_FORWARD": "0"} and hf["model"] == "hf"  # what a row ran
    table = proc.stdout.rstrip().splitlines()[-7:]  # the table comes last, the reference first, the peer last
    assert table[0].startswith("| reference | ours | COMPILE=0 ATTENTION=sdpa ADAMW_IMPL=torch |"), table[0]
    assert "reference (not degenerate)" in table[0]
    assert table[-3].startswith("| keep | ours | RESHARD_AFTER_FORWARD=0 |") and table[-1].startswith(
        "| hf-bf16 |"
    )
    assert re.search(r"\| \d+\.\d\dx \| \d+\.\d\dx \| ok \(", table[-3]), table[-3]  # vs HF bf16, twice
    assert proc.stdout.count("ms of CPU operators per step") == 6  # --profile: rank 0's, once a variant
