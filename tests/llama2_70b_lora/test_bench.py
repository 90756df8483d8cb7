"""perf/bench_lora.py on the CPU: the rows each step trains on (`perf/lib/rows.py`), the learning-rate
schedule it shares with curve_parity's LoRA curve, its tiny runs with their parity verdicts and its memory
step (`perf/lib/memory.py`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from perf.lib import memory, rows, schedules, text

ROOT = Path(__file__).resolve().parents[2]


def test_stream_rows_are_the_excerpts_rows_in_order():
    made = rows.LoraRows(32000, 256, torch.device("cpu"), 0, 1, "stream", ahead=2)
    want = torch.from_numpy(text.rows(text.wiki_ids(), 3, 257))
    for step in range(3):  # the two made ahead and one made on demand
        tokens, labels = made(step)
        assert torch.equal(tokens[0], want[step, :-1]) and torch.equal(labels[0, 85:], want[step, 86:])
        assert (labels[0, :85] == -100).all()  # the first third is not scored


def test_fixed_rows_repeat_and_ranks_differ():
    for source in ("row", "random"):
        made = rows.LoraRows(32000, 128, torch.device("cpu"), 0, 2, source, ahead=4)
        assert made(0) is made(3)
    first, second = (rows.LoraRows(32000, 128, torch.device("cpu"), r, 2, "stream", 1)(0) for r in (0, 1))
    assert not torch.equal(first[0], second[0])


def test_learning_rate_is_the_curves_warm_up():
    lr = schedules.lora_lr
    assert [lr(i, 5) for i in range(8)] == [schedules.lr_at(i, 4e-4, 50) for i in range(8)]
    assert lr(0, 5) < lr(4, 5) < lr(5, 5) == 4e-4
    assert lr(7, 0) == 4e-4


def test_tiny_bench_prints_parity_and_stores_every_loss(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "perf.bench_lora",
            "--tiny",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--variant",
            "ours-bf16:",
            "--peer",
            "peft-bf16:",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    runs = json.loads((tmp_path / "bench_lora.json").read_text())["runs"]
    assert set(runs) == {"reference", "ours-bf16", "peft-bf16"}
    assert runs["reference"]["overrides"]["LORA_KERNEL"] == "pytorch" and runs["peft-bf16"]["model"] == "peft"
    assert all(len(r["losses"]) == 4 for r in runs.values())  # compile, warm-up, 2 timed (no GPU memory step)
    assert runs["ours-bf16"]["parity"]["ok"] and runs["peft-bf16"]["parity"]["ok"]
    # the attention backend each side ran (auto picks SDPA on the CPU), recorded beside its speed
    attention = {name: r["attention"] for name, r in runs.items()}
    assert set(attention.values()) == {"sdpa"}
    assert "| ours-bf16 |" in done.stdout and "ok (" in done.stdout


def test_two_process_profile_runs_on_every_rank(tmp_path):
    """`--profile` under torchrun: every rank runs the profiled steps (their FSDP2 collectives need all
    ranks); rank 0 alone prints. A rank 0 profiling alone would wait forever for the others' collectives:
    this run would hang until the timeout."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "perf.bench_lora",
            "--tiny",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--profile",
            "3",
            "--variant",
            "ours-bf16:",
            "--peer",
            "none",
            "--reference",
            "none",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("ms of CPU operators per step") == 1, done.stdout[-2000:]
    run = json.loads((tmp_path / "bench_lora.json").read_text())["runs"]["ours-bf16"]
    assert len(run["losses"]) == 1 + 1 + 1 + 2  # compile, the memory step, timed, profiled (no warm-up)
    # the memory step: FSDP2's all-gathered weights still allocated as the backward reaches each block
    gathered = run["backward_gathered_gib"]
    assert len(gathered) == 2 and all(g is not None and g >= 0 for g in gathered), gathered
    assert "memory, ours-bf16: as the backward reached the last block: " in done.stdout, done.stdout[-2000:]


def test_memory_step_places_the_peak_between_two_marks(monkeypatch):
    """`memory.memory_step`'s GPU part with the allocator's counters stubbed: the peak read at each mark
    (and reset there) is the stretch since the mark before, so the largest names the two marks around it, and
    the forward's peak is the largest before the model's forward ends."""
    gib, reads = 2**30, []
    peaks = {7: 9, 3: 5}  # the 7th read: from the model's forward's end to the backward reaching block 1

    def max_allocated(device=None):
        reads.append(None)
        return peaks.get(len(reads), 1) * gib

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", max_allocated)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2 * gib)
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(2))
    model.forward = lambda x: model.layers[1](model.layers[0](x))
    x = torch.randn(2, 4, requires_grad=True)
    got = memory.memory_step(lambda: model(x).sum().backward(), model, torch.device("cuda"))
    # marks: step starts, fwd 0 starts, fwd 0 ends, fwd 1 starts, fwd 1 ends, model's forward ends, backward
    # reaches 1, backward reaches 0, step ends
    assert len(reads) == 9
    assert got["peak_between"] == {
        "gib": 9,
        "from": "the model's forward ends",
        "to": "the backward reaches block 1",
    }
    assert got["forward_peak_gib"] == 5


def test_curve_sharded_over_two_processes_is_the_one_process_curve(tmp_path):
    """`perf/curve_parity.py lora` under torchrun: every variant sharded by FSDP2 over the processes, each
    training the same row, traces one process's curves: ours in bf16 and native FP8 with the frozen base
    stored in FP8 (whole in one process, as FP8 shards in two). Only rank 0 writes."""
    curves = {}
    for procs in (1, 2):
        out = tmp_path / str(procs)
        out.mkdir()
        env = {**os.environ, "OUT": str(out), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        launch = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"] if procs == 2 else []
        done = subprocess.run(
            [
                sys.executable,
                *launch,
                "-m",
                "perf.curve_parity",
                "lora",
                "--tiny",
                "--mlperf-regime",
                "--steps",
                "3",
                "--lora-variant",
                "fp8w: PRECISION=fp8 FP8_BACKEND=native FP8_WEIGHTS=1",
                "--lora-control",
                "none",
                "--lora-seeds",
                "0",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.count("| lora | fp8w |") == 1, done.stdout[-2000:]
        result = json.loads((out / "curve_parity.json").read_text())
        assert result["processes"] == procs
        curves[procs] = result["parts"]["lora"]["curves"]
    assert set(curves[2]) == {"bf16", "fp8w"}
    for name, losses in curves[1].items():
        # the first loss, before any update, the same; after, FSDP2's bf16 compute copies of the adapters and
        # float32 reduction round otherwise than one process's autocast: 1.5e-4 apart at the second step
        assert curves[2][name][0] == pytest.approx(losses[0], rel=1e-6), name
        torch.testing.assert_close(torch.tensor(curves[2][name]), torch.tensor(losses), rtol=1e-3, atol=0)


def test_a_variants_settings_reach_its_run():
    """A bench variant's overrides are the config's names, and its run is the config's: ACL recomputes the
    first blocks only, so FP8_MLP_ACTIVATIONS has blocks to apply to; the curve's build says the same."""
    from perf import curve_parity
    from perf.lib import overrides
    from training.llama.model import PRESETS
    from training.llama2_70b_lora.config import LoraConfig

    asked = {
        "PRECISION": "fp8",
        "FP8_BACKEND": "native",
        "FP8_MLP_ACTIVATIONS": "1",
        "FP8_FAST_ACCUM": "1",
        "ACTIVATION_CHECKPOINTING": "1",
        "ACL": "1",
        "FP8_WEIGHTS": "1",
    }
    start = overrides.base("llama2_70b_lora", None, curve_parity.LORA_VALUES)
    spec = overrides.build(LoraConfig, start, asked).run_spec()
    f = spec.features
    assert (f.activation_checkpointing, f.checkpoint_layers, spec.fp8_weights) == (True, 1, True)
    assert f.fp8.backend == "native" and f.fp8.mlp_activations_in_fp8 and f.fp8.fast_accum
    model, _ = curve_parity.build_ours(
        LoraConfig, curve_parity.LORA_VALUES, asked, PRESETS["tiny"], torch.device("cpu")
    )
    recomputed = [m.recompute for m in model.modules() if type(m).__name__ == "Checkpointed"]
    assert recomputed[0] and not any(recomputed[1:]) and len(recomputed) > 1  # ACL=1: the first block only


def test_kept_block_lists_what_a_block_saves(monkeypatch, capsys):
    """perf/kept_block.py --tiny: block 1's saved tensors, parameters left out, its input among them (the
    tiny model's rows are 64 tokens of width 64)."""
    from perf import kept_block

    monkeypatch.setattr(sys, "argv", ["kept_block", "--tiny"])
    assert kept_block.main() == 0
    out = capsys.readouterr().out
    table = out.split("block 1: what its forward saved for the backward (parameters left out)")[1]
    assert "| [1, 64, 64] | bfloat16 |" in table and "block 1: saved" in table
