"""perf/bench_throughput.py's logic on the CPU: 2 gloo ranks, 2-layer models of each row's family, ours (and
torchtitan's where it is installed), the JSON and the table."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from perf import bench_throughput
from tests.throughput.test_command import env
from training.common.config import ConfigError


def test_bench_tiny_runs_and_writes_json(tmp_path):
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    bench = ["-m", "perf.bench_throughput", "--tiny", "--steps", "2", "--warmup", "1", "--no-compile"]
    rows = ["--rows", "llama8b-bf16,llama8b-fp8,mistral-bf16", "--profile", "2", "--lr-warmup", "50"]
    variants = ["--variant", "ours:; torchao: --fp8_backend torchao"]
    cmd = [*launch, *bench, *rows, *variants]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**env(), "OUT": str(tmp_path)}, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "bench_throughput.json").read_text())
    runs = result["runs"]
    assert result["world_size"] == 2 and result["seq"] == 64 and result["lr_warmup"] == 50
    for row in ("llama8b-bf16", "mistral-bf16"):
        ours = runs[f"{row}:ours"]
        assert ours["tokens_per_s_per_gpu"] > 0 and ours["tflops_per_gpu"]["amd"] > 0
        assert 5.5 < ours["first_loss"] < 7.0  # ~ln(512): random weights, random tokens
        assert ours["parity"]["ok"] and ours["losses"][0] == runs[f"{row}:reference"]["losses"][0]
        # the reference recomputes its blocks (so it fits at full depth); ours as the suite runs it does not
        assert runs[f"{row}:reference"]["backends"]["activation_checkpointing"] != "off"
        assert ours["backends"]["activation_checkpointing"] == "off"
    assert "sliding window 32" in runs["mistral-bf16:ours"]["backends"]["attention"]
    assert runs["llama8b-fp8:ours"] == {"flags": "", "skipped": "FP8 needs a GPU"}
    # each row records its train_fsdp.py flags; an FP8 backend asked of a BF16 row is skipped
    assert runs["llama8b-bf16:reference"]["flags"] == bench_throughput.REFERENCE
    assert runs["llama8b-bf16:torchao"] == {
        "flags": "--fp8_backend torchao",
        "skipped": "--fp8_backend torchao: an FP8 variant, and the row runs no FP8",
    }
    # the FP8 row's reference (bf16) is the bf16 row's twin: the steps the two repeat (all, on the CPU)
    assert runs["llama8b-bf16:ours"]["parity"]["repeated_steps"] == len(runs["llama8b-bf16:ours"]["losses"])
    titan = runs["llama8b-bf16:titan"]
    assert "ms" in titan or titan == {"skipped": "torchtitan not importable"}
    assert proc.stdout.rstrip().splitlines()[-1].startswith("| mistral-bf16 | titan | - |")


def test_variants_are_train_fsdp_flags_read_by_its_parser():
    torchao, flash4 = bench_throughput.variants(["torchao: --fp8_backend=torchao; --attention flash4"])
    assert torchao == bench_throughput.Variant("torchao", ("--fp8_backend=torchao",))
    assert flash4.label == "--attention flash4"  # unlabelled: its flags name it
    args = bench_throughput.run_args(
        "llama8b-fp8", torchao, bench_throughput.argparse.Namespace(mbs=2, compile=False)
    )
    assert (args.fp8_backend, args.enable_fp8, args.batch_size, args.grad_accum) == ("torchao", True, 2, 1)
    for text, said in [
        ("x: --fp8-bakend torchao", "did you mean --fp8-backend"),
        ("x: --attention flash9", "flash9"),
        ("x: --batch_size 4", "--batch_size is set by the bench"),
        ("a: --attention sdpa; a: --attention flash4", "label(s) a given twice"),
        ("titan: --attention sdpa", "label(s) titan given twice or a peer's"),
        ("x: fp8_backend=torchao", "expected train_fsdp.py flags"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(said)):
            bench_throughput.variants([text])
