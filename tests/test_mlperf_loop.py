"""The one MLPerf loop (`training.common.mlperf_loop`) with a scripted step and evaluation, on one CPU
process: the events of each log convention in order, the stops (target, step limit, non-finite loss or
score) and the outcome each gives. The trainers' own runs are in tests/{bert,llama,llama2_70b_lora}."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from training.common.dist import DistInfo
from training.common.mlperf_loop import MLPerfRun, Schedule, StepResult, peak_memory_line
from training.common.outcome import Outcome

CPU = DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
CFG = SimpleNamespace(clear_caches=False, org="org", platform="cpu", num_nodes=1, logdir=None, run_tag=None)


@dataclass(frozen=True)
class Row:
    name: str = "llm"
    higher_is_better: bool = False
    samples_key: str = "samples_count"


def run(caplog, scores, row=Row(), losses=(), max_steps=4, hyperparameters=None, own=None, **train):
    """Steps of global batch 8 (loss 2.0, or `losses` by step; each counting `own` samples of its own where
    given), evaluations after steps 2 and 4 giving `scores` in turn: (outcome, the events after `seed`:
    (key, value, metadata), the timings left out)."""
    caplog.set_level(logging.INFO)
    caplog.clear()
    steps_run = []
    run = MLPerfRun(row, CFG, CPU, seed=7, prog="test")
    run.mllog.hyperparameters(hyperparameters or {})

    def start():
        assert "run_start" in run.mllog.logged and "block_start" not in run.mllog.logged
        return lambda index: (
            steps_run.append(index)
            or StepResult(torch.tensor(dict(losses).get(index, 2.0)), 0.1, samples=own)
        )

    scores = iter(scores)
    ended = run.train(Schedule(8, max_steps, {2, 4}, 2), start, lambda: next(scores), 1.0, **train)
    # (mlperf-logging's handler keeps the stdout of the process's first run: its records are read instead)
    lines = [json.loads(m.split(":::MLLOG ", 1)[1]) for m in caplog.messages if ":::MLLOG " in m]
    keys = [e["key"] for e in lines]
    events = []
    for e in lines[keys.index("seed") + 1 :]:
        value = (
            {k: v for k, v in e["value"].items() if k != "throughput"}
            if isinstance(e["value"], dict)
            else e["value"]
        )
        events.append(
            (e["key"], value, {k: v for k, v in e["metadata"].items() if k not in ("file", "lineno")})
        )
    assert steps_run == list(range(len(steps_run)))
    return ended, events


def test_the_samples_count_convention_opens_a_block_for_each_stretch_of_training(caplog):
    ended, events = run(caplog, [5.0, 4.0])
    assert ended == Outcome("not_converged", "eval loss 4.0000 (target 1.0) after 32 samples")
    stats = {"train_loss": 2.0, "lr": 0.1}
    assert events == [
        ("init_stop", None, {}),
        ("run_start", None, {}),
        ("block_start", None, {"samples_count": 0}),
        ("tracked_stats", stats, {"samples_count": 16, "step": 2}),
        ("block_stop", None, {"samples_count": 16}),
        ("eval_start", None, {"samples_count": 16}),
        ("eval_accuracy", 5.0, {"samples_count": 16}),
        ("eval_stop", None, {"samples_count": 16}),
        ("block_start", None, {"samples_count": 16}),
        ("tracked_stats", stats, {"samples_count": 32, "step": 4}),
        ("block_stop", None, {"samples_count": 32}),
        ("eval_start", None, {"samples_count": 32}),
        ("eval_accuracy", 4.0, {"samples_count": 32}),
        ("eval_stop", None, {"samples_count": 32}),  # the step limit: no block after it
        ("train_samples", 32, {}),
        ("run_stop", None, {"samples_count": 32, "status": "aborted"}),
    ]


def test_the_epoch_convention_keeps_one_epoch_and_one_block_around_the_run(caplog):
    """As NVIDIA's BERT logs (v5.0 nyx_n1_ngc25.04_pytorch result_0.txt): epoch_start, block_start with
    first_epoch_num 1; at each evaluation tracked_stats, eval_start and eval_stop (valued with the sample
    count), eval_accuracy; block_stop, epoch_stop at the end."""
    ended, events = run(caplog, [0.5, 0.9], Row("bert", True, "epoch_num"), eval_samples=64, metric="acc")
    assert ended == Outcome("not_converged", "acc 0.9000 (target 1.0) after 32 samples")
    assert events == [
        ("init_stop", None, {}),
        ("run_start", None, {}),
        ("epoch_start", None, {"epoch_num": 0}),
        ("block_start", None, {"first_epoch_num": 1, "epoch_count": 1}),
        ("tracked_stats", {}, {"epoch_num": 16, "step": 2}),
        ("eval_start", 16, {"epoch_num": 16}),
        ("eval_stop", 16, {"epoch_num": 16}),
        ("eval_accuracy", 0.5, {"epoch_num": 16}),
        ("tracked_stats", {}, {"epoch_num": 32, "step": 4}),
        ("eval_start", 32, {"epoch_num": 32}),
        ("eval_stop", 32, {"epoch_num": 32}),
        ("eval_accuracy", 0.9, {"epoch_num": 32}),
        ("block_stop", None, {"first_epoch_num": 1}),
        ("epoch_stop", None, {"epoch_num": 32}),
        ("train_samples", 32, {}),
        ("eval_samples", 64, {}),
        ("run_stop", None, {"status": "aborted"}),
    ]


def test_steps_that_count_their_own_samples_are_counted_so(caplog):
    """BERT's steps count the sequences of their packed rows (NVIDIA: 150,369 after 196 steps of 768
    nominal samples): every event counts those. The step limit ends the run after a step without an
    evaluation, so train_samples, epoch_stop and the outcome count the steps after the last evaluation."""
    ended, events = run(caplog, [0.5, 0.9], Row("bert", True, "epoch_num"), own=7, max_steps=5, metric="acc")
    assert ended == Outcome("not_converged", "acc 0.9000 (target 1.0) after 35 samples")
    counted = [
        (key, metadata.get("epoch_num", value))
        for key, value, metadata in events
        if key in ("eval_accuracy", "epoch_stop", "train_samples")
    ]
    assert counted == [
        ("eval_accuracy", 14),
        ("eval_accuracy", 28),
        ("epoch_stop", 35),
        ("train_samples", 35),
    ]
    assert events[-1] == ("run_stop", None, {"status": "aborted"})


@pytest.mark.parametrize("row, scores", [(Row(), [5.0, 1.0]), (Row("bert", True, "epoch_num"), [0.2, 1.0])])
def test_reaching_the_target_ends_the_run_converged(caplog, row, scores):
    ended, events = run(caplog, scores, row, max_steps=6)
    assert ended.status == "converged" and ended.detail.endswith("after 32 samples")
    assert events[-1] == (
        "run_stop",
        None,
        {**({"samples_count": 32} if row.name == "llm" else {}), "status": "success"},
    )
    keys = [key for key, _, _ in events]
    assert keys.count("block_start") == keys.count("block_stop") and "tracked_stats" in keys


def test_a_run_that_stops_before_its_first_evaluation_says_no_evaluation_ran(caplog):
    """Evaluations after steps 2 and 4, the step limit at 1: the schedule evaluates nothing (the preflight
    refuses such a config), and the run's outcome says so rather than an eval loss of nan."""
    assert not Schedule(8, 1, {2, 4}, 2).evaluates() and not Schedule(8, 4, {0}, 2).evaluates()
    assert Schedule(8, 2, {2, 4}, 2).evaluates() and Schedule(8, 4, range(4, 5), 2).evaluates()
    ended, events = run(caplog, [], max_steps=1)
    assert ended == Outcome("not_converged", "no evaluation ran (target eval loss 1.0) after 8 samples")
    assert "eval_accuracy" not in [key for key, _, _ in events]


def test_a_non_finite_loss_ends_the_run_at_the_next_check(caplog, capsys):
    ended, events = run(caplog, [], losses=[(0, math.nan)])
    assert ended == Outcome("diverged", "non-finite loss by step 2")
    keys = [key for key, _, _ in events]
    assert keys == ["init_stop", "run_start", "block_start", "block_stop", "train_samples", "run_stop"]
    assert events[-1][2] == {"samples_count": 16, "status": "aborted"}
    assert "test: non-finite loss by step 2; ending the run as aborted" in capsys.readouterr().err


def test_the_loop_says_its_sample_limit_as_the_console_reads_it(caplog, capsys):
    """The step limit times the global batch (4 steps of 8), before run_start, in the console's words."""
    from training.common.console import LIMIT_LINE

    run(caplog, [5.0, 4.0])
    said = [line for line in capsys.readouterr().out.splitlines() if LIMIT_LINE.match(line)]
    assert said == ["test: sample limit 32 (4 steps of 8 samples)"]


def test_a_non_finite_score_ends_the_run(caplog):
    ended, _ = run(caplog, [math.nan])
    assert ended == Outcome("diverged", "non-finite eval loss at 16 samples")


def test_what_the_hyperparameters_logged_is_not_logged_again(caplog):
    _, events = run(caplog, [5.0, 4.0], hyperparameters={"train_samples": 100}, eval_samples=6)
    once = [("train_samples", 100), ("eval_samples", 6)]  # the hyperparameter, then the eval set at the end
    assert [(key, value) for key, value, _ in events if key.endswith("_samples")] == once


def test_more_counters_and_stats_go_where_the_rules_read_them(caplog):
    _, events = run(caplog, [5.0, 4.0], eval_counters=("epoch_num",), stats=lambda rate: {"per_gpu": 1})
    evals = [metadata for key, _, metadata in events if key == "eval_accuracy"]
    assert evals == [{"samples_count": 16, "epoch_num": 16}, {"samples_count": 32, "epoch_num": 32}]
    tracked = [value for key, value, _ in events if key == "tracked_stats"]
    assert tracked[0] == {"per_gpu": 1, "train_loss": 2.0, "lr": 0.1}


def test_peak_memory_line_says_the_runs_peak_against_the_gpu(monkeypatch):
    """After run_stop the trainer says its GPU memory peak (what a config's ACL and MINIBS are chosen from);
    nothing off the GPU. The allocator's counters are stubbed: no GPU here."""
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 118.2 * 2**30)
    gpu = SimpleNamespace(total_memory=140 * 2**30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: gpu)
    assert peak_memory_line(torch.device("cpu")) is None
    line = peak_memory_line(torch.device("cuda", 0))
    assert line == "peak GPU memory 118.2 GiB of 140.0 GiB (the busiest rank, warm-up included)"
