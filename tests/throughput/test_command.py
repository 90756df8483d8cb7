"""The command on the CPU, as a user runs it on GPUs: `torchrun --nproc_per_node=2 train_fsdp.py CONFIG TYPE
...` with gloo, a tiny config of each model family (Llama with FP8, FLUX), and the suite (`--suite`) over a
folder of tiny configs named as the real ones, writing its markdown and JSON table."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "embedding_dim": 64,
    "hidden_dim": 192,
    "vocab_size": 512,
    "max_seq_len": 64,
    "eps": 1e-5,
}
TINY_FLUX = {
    "patch_size": 1,
    "in_channels": 16,
    "num_layers": 1,
    "num_single_layers": 2,
    "attention_head_dim": 16,
    "num_attention_heads": 2,
    "joint_attention_dim": 32,
    "pooled_projection_dim": 16,
    "guidance_embeds": True,
    "axes_dims_rope": [4, 6, 6],
}
QUICK = ["--num_iteration", "4", "--grad_accum", "2", "--enable_compile", "False"]


def env() -> dict[str, str]:
    """No inherited torchrun or allocator variables, one CPU thread per process."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_", "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC")
        )
    }
    return {**keep, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}


def torchrun(*args: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(ROOT / "train_fsdp.py"),
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=600)


def test_llama_with_fp8_on_two_processes(tmp_path):
    config = tmp_path / "tiny-llama.json"
    config.write_text(json.dumps({"name": "tiny Llama", **TINY}))
    out = tmp_path / "result.json"
    proc = torchrun(
        str(config), "llama", "--batch_size", "2", "--enable_fp8", "True", *QUICK, "--json", str(out)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    steps = [ln for ln in lines if ln.startswith("step ")]
    assert len(steps) == 2 and "ETA 0:00:0" in steps[0] and steps[0].endswith("(warm-up)")
    assert "(iterations 3-4/4)" in steps[1] and "TFLOP/s/process (amd)" in steps[1]  # no GPU here
    assert any("fp8: native FP8" in ln for ln in lines)
    result = json.loads(out.read_text())
    assert (result["world_size"], result["batch_size"], result["precision"], result["measured_steps"]) == (
        2,
        2,
        "fp8",
        1,
    )
    assert result["tokens_per_s_per_gpu"] == pytest.approx(result["sequences_per_s_per_gpu"] * 64)
    assert result["tflops_per_gpu"]["amd"] > result["tflops_per_gpu"]["ours"] > 0
    assert result["backends"]["data_parallel"].startswith("FSDP2 over 2 ranks")
    assert (
        result["backends"]["allocator"] == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    )  # the default
    assert result["published"]["row"] is None  # no published figure for a tiny model (nor on the CPU)
    assert "TFLOP/s/process (AMD's: 6 x matrices" in proc.stdout


def test_reducing_gradients_every_iteration_or_once_per_step_trains_alike(tmp_path):
    config = tmp_path / "tiny-llama.json"
    config.write_text(json.dumps({"name": "tiny Llama", **TINY}))
    runs = {}
    for each in ("True", "False"):
        flags = ["--num_iteration", "6", "--grad_accum", "2", "--enable_compile", "False"]
        proc = torchrun(str(config), "llama", "--batch_size", "2", *flags, "--reduce_each_iteration", each)
        assert proc.returncode == 0, proc.stderr[-3000:]
        steps = [ln for ln in proc.stdout.splitlines() if ln.startswith("step ")]
        runs[each] = [ln.split(" loss ")[1].split()[0] for ln in steps]
        when = "after every iteration" if each == "True" else "once per optimizer step"
        assert f"gradients reduce-scattered {when}" in proc.stdout
    assert len(runs["True"]) == 3 and runs["True"] == runs["False"]


def test_flux_on_two_processes(tmp_path):
    pytest.importorskip("diffusers", reason="FLUX's transformer is diffusers' FluxTransformer2DModel")
    config = tmp_path / "tiny-flux.json"
    config.write_text(
        json.dumps({"name": "tiny FLUX", "resolution": 64, "text_length": 8, "transformer": TINY_FLUX})
    )
    out = tmp_path / "result.json"
    proc = torchrun(
        str(config),
        "flux",
        "--batch_size",
        "2",
        "--num_iteration",
        "3",
        "--enable_compile",
        "False",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["images_per_s_per_gpu"] > 0 and result["tokens_per_s_per_gpu"] > 0
    assert result["tokens_per_s_per_gpu"] == pytest.approx(result["images_per_s_per_gpu"] * (16 + 8))
    assert result["grad_accum"] == 1 and "FSDP2 over 2 ranks" in result["backends"]["data_parallel"]
    assert "images/s/process" in proc.stdout


def test_the_suite_writes_its_table(tmp_path):
    """One row of the MI300X table (Mistral 7B BF16) with a tiny config under the real file name."""
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "mistral-7b-v0.1.json").write_text(
        json.dumps({"name": "Mistral 7B v0.1", "arch_name": "mistral", **TINY, "window_size": 16})
    )
    out = tmp_path / "results"
    cmd = [
        sys.executable,
        str(ROOT / "train_fsdp.py"),
        "--suite",
        "--nproc_per_node",
        "2",
        "--gpu",
        "MI300X",
        "--configs",
        str(configs),
        "--only",
        "mistral-7b-v0.1-8192-bf16",
        "--output_dir",
        str(out),
        "--",
        *QUICK,
        "--seq_len",
        "64",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = (out / "throughput.md").read_text().splitlines()
    assert table[0].startswith("The rows of AMD's MI300X table (MI300X, as asked (--gpu)), run without a GPU")
    assert table[-1].startswith("| Mistral 7B v0.1 | BF16 | 64 | 3 | ") and "| 483.17 |" in table[-1]
    rows = json.loads((out / "throughput.json").read_text())["rows"]
    assert len(rows) == 1 and rows[0]["result"]["batch_size"] == 3  # AMD's MI300X batch for this row
    assert "sliding window 16" in rows[0]["result"]["backends"]["attention"]
    assert (out / "mistral-7b-v0.1-8192-bf16.log").read_text().count("step ") >= 2


def test_a_bad_flag_exits_2_naming_it():
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "train_fsdp.py"),
            "configs/throughput/llama-3.1-8b-4k.json",
            "llama",
            "--enable_fp8",
            "yes",
        ],
        capture_output=True,
        text=True,
        env=env(),
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "train_fsdp.py: error: argument --enable_fp8" in proc.stderr and "not 'yes'" in proc.stderr


def test_help_lists_the_flags():
    for argv, flag in ((["--help"], "--batch_size"), (["--suite", "--help"], "--nproc_per_node")):
        proc = subprocess.run(
            [sys.executable, str(ROOT / "train_fsdp.py"), *argv],
            capture_output=True,
            text=True,
            env=env(),
            cwd=ROOT,
            timeout=120,
        )
        assert proc.returncode == 0 and flag in proc.stdout, proc.stderr


def test_a_row_stopped_mid_run_keeps_what_it_printed(tmp_path):
    """The suite writes each row's log line by line: a row still running (or killed) has its lines on disk."""
    import time

    log, ready = tmp_path / "row.log", tmp_path / "ready"
    row = [sys.executable, "-c", "print('step 1/8 loss 9.1', flush=True); import time; time.sleep(60)"]
    runner = (
        f"import pathlib; from training.throughput.suite import run_row; "
        f"pathlib.Path({str(ready)!r}).touch(); "
        f"run_row({row!r}, pathlib.Path({str(log)!r}))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", runner], env=env(), cwd=ROOT, stdout=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (log.exists() and "step 1/8" in log.read_text()):
            time.sleep(0.2)
        assert ready.exists() and "step 1/8 loss 9.1" in log.read_text()
    finally:  # the runner and its row, as a signal to the suite's process group would
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert "step 1/8 loss 9.1" in log.read_text()
