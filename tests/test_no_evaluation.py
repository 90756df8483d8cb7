"""A config whose schedule has no evaluation before the run stops is refused at the preflight, in one line
naming its schedule's variables, the rule and values that would work, before any data is read: each
benchmark's `no_evaluation`, answered from the schedule its loop runs (`schedule().evaluates()`), and
run_with_docker.sh on each CPU config with the overriding variables, as a user runs it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from training.bert.config import BertConfig
from training.llama2_70b_lora.config import LoraConfig
from training.llama31_8b.config import LlamaPretrainConfig

REPO = Path(__file__).resolve().parents[1]

# BERT's CPU config: 11 samples a step (10 rows x 1.1 sequences), MAX_STEPS 1200
BERT = {
    "DATADIR": "/data",
    "BATCHSIZE": "10",
    "PACKING_FACTOR": "1.1",
    "LR": "0.012",
    "MAX_STEPS": "1200",
    "EVAL_ITER_START_SAMPLES": "1100",
    "EVAL_ITER_SAMPLES": "1100",
}
LORA = {"DATADIR": "/data", "MINIBS": "8", "MBS": "4", "VAL_CHECK_INTERVAL": "128", "SKIP_EVALS": "0"}
LLAMA = {
    "DATADIR": "/data",
    "GBS": "8",
    "MBS": "4",
    "MAX_LR": "3e-3",
    "WARMUP_STEPS": "16",
    "EVAL_EVERY": "512",
    "MAX_SAMPLES_TERMINATION": "8192",
}


def schedule(cfg):
    return cfg.schedule() if isinstance(cfg, LlamaPretrainConfig) else cfg.schedule(1)


@pytest.mark.parametrize(
    "cls, env, fix, working",
    [
        # no evaluation below MAX_SAMPLES_TERMINATION: the case of the CPU config with all three at 1100
        (
            BertConfig,
            {**BERT, "MAX_SAMPLES_TERMINATION": "1100"},
            "set EVAL_ITER_START_SAMPLES <= 1099, or MAX_SAMPLES_TERMINATION > 1100",
            [{"eval_iter_start_samples": 1099}, {"max_samples_termination": 1101}],
        ),
        # the first evaluation (step 100) after MAX_STEPS
        (
            BertConfig,
            {**BERT, "MAX_SAMPLES_TERMINATION": "14300", "MAX_STEPS": "50"},
            "set EVAL_ITER_START_SAMPLES <= 550, or MAX_STEPS >= 100",
            [{"eval_iter_start_samples": 550}, {"max_steps": 100}],
        ),
        # an evaluation at 0 samples would come before any step: the next one is EVAL_ITER_SAMPLES
        (
            BertConfig,
            {**BERT, "MAX_SAMPLES_TERMINATION": "1100", "EVAL_ITER_START_SAMPLES": "0"},
            "set EVAL_ITER_START_SAMPLES between 1 and 1099, or MAX_SAMPLES_TERMINATION > 1100",
            [
                {"eval_iter_start_samples": 1},
                {"eval_iter_start_samples": 1099},
                {"max_samples_termination": 1101},
            ],
        ),
        (
            BertConfig,
            {
                **BERT,
                "MAX_SAMPLES_TERMINATION": "1100",
                "EVAL_ITER_START_SAMPLES": "5000",
                "MAX_STEPS": "200",
            },
            "set EVAL_ITER_START_SAMPLES <= 1099, or MAX_SAMPLES_TERMINATION > 5000 and MAX_STEPS >= 455",
            [{"eval_iter_start_samples": 1099}, {"max_samples_termination": 5001, "max_steps": 455}],
        ),
        # LoRA: the first evaluation after (SKIP_EVALS + 1) x 16 steps
        (
            LoraConfig,
            {**LORA, "MAX_STEPS": "40", "SKIP_EVALS": "4"},
            "set MAX_STEPS >= 80, or SKIP_EVALS <= 1",
            [{"max_steps": 80}, {"skip_evals": 1}],
        ),
        (
            LoraConfig,
            {**LORA, "MAX_STEPS": "8"},
            "set MAX_STEPS >= 16, or VAL_CHECK_INTERVAL <= 64",
            [{"max_steps": 16}, {"val_check_interval": 64}],
        ),
        # Llama 3.1 8B: the sample limit (1024 steps) or MAX_STEPS before the first evaluation
        (
            LlamaPretrainConfig,
            {**LLAMA, "EVAL_EVERY": "16384"},
            "set EVAL_EVERY <= 8192, or MAX_SAMPLES_TERMINATION > 16376",
            [{"eval_every": 8192}, {"max_samples_termination": 16377}],
        ),
        (
            LlamaPretrainConfig,
            {**LLAMA, "START_EVAL_AT": "9000", "MAX_STEPS": "100"},
            "set START_EVAL_AT <= 800, or MAX_STEPS >= 1125 and MAX_SAMPLES_TERMINATION > 8992",
            [{"start_eval_at": 800}, {"max_steps": 1125, "max_samples_termination": 8993}],
        ),
    ],
)
def test_the_line_names_values_that_give_an_evaluation(cls, env, fix, working):
    cfg = cls.from_env(env)
    assert not schedule(cfg).evaluates()
    line = cfg.no_evaluation(1)
    assert line.startswith("no evaluation scheduled: ") and line.endswith(fix)
    for change in working:
        fixed = dataclasses.replace(cfg, **change)
        assert schedule(fixed).evaluates() and fixed.no_evaluation(1) is None, change


CPU_RUNS = {
    # the run: evaluations are scheduled below MAX_SAMPLES_TERMINATION only, so there is none
    "bert": (
        "bert/config_CPU_1x1x10.sh",
        {"MAX_SAMPLES_TERMINATION": "1100", "EVAL_ITER_START_SAMPLES": "1100", "EVAL_ITER_SAMPLES": "1100"},
        "set EVAL_ITER_START_SAMPLES <= 1099, or MAX_SAMPLES_TERMINATION > 1100",
    ),
    "llama2_70b_lora": (
        "llama2_70b_lora/config_CPU_1x1x1.sh",
        {"MAX_STEPS": "8"},
        "set MAX_STEPS >= 16, or VAL_CHECK_INTERVAL <= 64",
    ),
    "llama31_8b": (
        "llama31_8b/config_CPU_1x1x1_8b.sh",
        {"EVAL_EVERY": "16384"},
        "set EVAL_EVERY <= 8192, or MAX_SAMPLES_TERMINATION > 16376",
    ),
}


@pytest.mark.parametrize("bench", CPU_RUNS)
def test_run_with_docker_refuses_it_before_any_run(tmp_path, bench):
    """`source <the CPU config>; export <the overrides>; bash run_with_docker.sh`: exit 2 after the
    preflight, whose one problem is the schedule (the data verifier is not run: DATADIR is empty), and no
    run's log."""
    config, overrides, fix = CPU_RUNS[bench]
    (tmp_path / "data").mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "CONTAINER_RUNTIME": "none",
        "PYTHON": sys.executable,
        "DATADIR": str(tmp_path / "data"),
        "LOGDIR": str(tmp_path / "results"),
    }
    exports = " ".join(f"{name}={value}" for name, value in overrides.items())
    proc = subprocess.run(
        [
            "bash",
            "-c",
            f'source "$1" && export {exports} && exec bash run_with_docker.sh',
            "user-shell",
            str(REPO / "configs" / config),
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    (problem,) = [line for line in proc.stderr.splitlines() if line.startswith("preflight: ")]
    assert problem.startswith("preflight: no evaluation scheduled: ") and problem.endswith(fix)
    assert all(f"{name}={value}" in problem for name, value in overrides.items())
    assert "preflight failed (exit 1): fix what it names above; no run was started" in proc.stderr
    assert not list((tmp_path / "results").glob("*.log"))
