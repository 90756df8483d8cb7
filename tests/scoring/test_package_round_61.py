"""A submission package for the current round (6.1.0) from logs our loop writes: ten runs of each LLM
benchmark at its 8-GPU config, through the shared loop (`MLPerfRun`), the trainer's own hyperparameters and
the disclosure its build gives, with a scripted step and evaluation that reaches the official target (the CPU
defaults' tiny models cannot: their logs are checked under 6.1.0 by tests/llama/test_train.py and
tests/llama2_70b_lora/test_cpu_default.py). MLCommons' package checker must accept the tree, with no
ruleset given anywhere."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from training.benchmarks import BENCHMARKS
from training.common.dist import DistInfo
from training.common.mlperf_loop import MLPerfRun, Schedule, StepResult
from training.fp8 import Fp8
from training.llama import parallel
from training.llama2_70b_lora import train as lora_train
from training.llama2_70b_lora.config import LoraConfig
from training.llama31_8b import train as pretrain
from training.llama31_8b.config import LlamaPretrainConfig
from training.scoring.__main__ import main

CPU = DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
SHARED = {
    "DGXNNODES": "1",
    "DGXNGPU": "8",
    "MLPERF_SUBMISSION_ORG": "testorg",
    "MLPERF_SUBMISSION_PLATFORM": "MI355X",
    "CONFIG_FILENAME": "config_MI355X_1x8x1.sh",
}
# Each benchmark: its config, its evaluation points (samples) and scores, reaching the target at the last;
# converging no faster than the RCPs allow (LoRA at GBS 8: 3072 samples; the 8B at GBS 32: 196,608).
CASES = {
    "llama2_70b_lora": (
        LoraConfig,
        {"LR": "0.0006", "MAX_STEPS": "550", "MINIBS": "1"},
        range(1536, 3073, 384),
        0.92,
    ),
    "llama31_8b": (
        LlamaPretrainConfig,
        {"GBS": "32", "MBS": "2", "MAX_LR": "8e-4", "WARMUP_STEPS": "64", "MAX_STEPS": "1200000"},
        range(12288, 196609, 12288),
        3.29,
    ),
}


def one_run(caplog, bench: str, seed: int, datadir) -> list[str]:
    cls, env, evals, last = CASES[bench]
    cfg = cls.from_env({**SHARED, **env, "BENCHMARK": bench, "DATADIR": str(datadir), "SEED": str(seed)})
    par = cfg.parallelism(8)
    gbs = par.dp * par.grad_accum * cfg.micro_batch_size
    caplog.clear()
    run = MLPerfRun(BENCHMARKS[bench], cfg, CPU, seed, "test")
    if bench == "llama2_70b_lora":
        lora_train.log_hyperparameters(run.mllog, cfg, par, gbs, 3901, 173, True)
    else:
        pretrain.log_hyperparameters(run.mllog, cfg, par)
    # what the build reports on 8 GPUs with FP8 linears and FP8 all-gathers
    built = parallel.Applied(fp8=Fp8(backend="native"), precision="fp8", collectives="fp8")
    run.log_disclosure(built.disclosure(par, cfg.micro_batch_size))
    steps = [samples // gbs for samples in evals]
    scores = iter([cfg.target + 0.05] * (len(steps) - 1) + [last])
    schedule = Schedule(gbs, steps[-1], set(steps), 10**9)
    run.train(
        schedule, lambda: lambda i: StepResult(torch.tensor(2.0), 1e-4), lambda: next(scores), cfg.target
    )
    return [m for m in caplog.messages if m.startswith(":::MLLOG ")]


@pytest.mark.parametrize("bench", CASES)
def test_ten_runs_of_our_loop_make_a_package_the_61_checker_accepts(bench, caplog, tmp_path, capsys):
    caplog.set_level(logging.INFO)
    logdir, system = tmp_path / "results", "MI355X_1x8x1"
    logdir.mkdir()
    for i in range(1, 11):
        tag = f"{bench}_{system}_{i}"
        (logdir / f"{tag}.log").write_text("\n".join(one_run(caplog, bench, i, tmp_path)) + "\n")
        effective = {
            "config": {
                "DGXSYSTEM": system,
                "DGXNNODES": 1,
                "DGXNGPU": 8,
                "MLPERF_SUBMISSION_ORG": "testorg",
                "MLPERF_SUBMISSION_PLATFORM": "MI355X",
            },
            "seed": i,
            "ruleset": "6.1.0",
            "versions": {"python": "3.12.3", "torch": "2.11.0", "hip": "7.2.2", "mlperf_logging": "4.1.68"},
            "accelerator": "AMD Instinct MI355X",
            "git_commit": "0123456789abcdef0123456789abcdef01234567",
        }
        (logdir / f"{tag}.config.json").write_text(json.dumps(effective))
    out = tmp_path / "submission"
    assert main([str(logdir), "--out", str(tmp_path / "summary"), "--package", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "PACKAGE CHECKER FOUND NO ERRORS, SUCCESS !" in printed, printed[-3000:]
    summary = json.loads((tmp_path / "summary" / "summary.json").read_text())
    assert summary["ruleset"] == "6.1.0" and all(run["compliant"] for run in summary["runs"])
    log = (out / "testorg" / "results" / system / bench / "result_0.txt").read_text()
    assert '"key": "lowest_numerical_precision_in_linear", "value": "fp8"' in log
    assert '"key": "config_filename", "value": "config_MI355X_1x8x1.sh"' in log
