"""A flux1 result set scored as MLCommons scores it: ten complete logs of the 6.1 rules at GBS 2048 (AMD's
MI325X recipe: LR 2.5e-4, no warm-up), each converging where the GBS 2048 RCP's runs do; the round read from
the runs' dates; each log compliant, the RCP check passed, the olympic mean of the minutes scaled by the RCP's
factor."""

from __future__ import annotations

import statistics

import pytest

from tests.scoring.scoring_logs import T0, mllog_line, write_log
from training.scoring.score import score_logdir

EVERY = 262_144
HPARAMS = {
    "global_batch_size": 2048,
    "gradient_accumulation_steps": 1,
    "evaluation_frequency": EVERY,
    "train_samples": 1_099_776,
    "eval_samples": 29_696,
    "opt_name": "adamw",
    "opt_base_learning_rate": 2.5e-4,
    "opt_learning_rate_warmup_steps": 0,
    "opt_adamw_beta_1": 0.9,
    "opt_adamw_beta_2": 0.95,
    "opt_adamw_epsilon": 1e-8,
    "opt_adamw_weight_decay": 0.1,
    "opt_gradient_clip_norm": 1.0,
    "target_accuracy": 0.586,
    "lowest_numerical_precision_in_linear": "bfloat16",
    "lowest_numerical_precision_in_attn": "bfloat16",
    "lowest_numerical_precision_in_comm": "bfloat16",
    "tensor_parallelism": 1,
    "pipeline_parallelism": 1,
    "context_parallelism": 1,
    "expert_parallelism": 1,
    "micro_batch_size": 32,
    "config_filename": "config_MI325X_8x8x32.sh",
}


def flux_log(evals: int, seed: int, minutes_per_eval: float = 2.05) -> list[str]:
    """A run evaluating every 262,144 samples, its loss falling to 0.5859 at the last of `evals`."""
    start = T0 + 120_000
    lines = [
        mllog_line(k, v)
        for k, v in (
            ("submission_benchmark", "flux1"),
            ("submission_org", "test"),
            ("submission_division", "closed"),
            ("submission_status", "onprem"),
            ("submission_platform", "8xMI325X"),
            ("cache_clear", True),
        )
    ]
    lines.append(mllog_line("init_start", event_type="INTERVAL_START"))
    lines += [mllog_line("seed", seed), *(mllog_line(k, v) for k, v in HPARAMS.items())]
    lines += [
        mllog_line("init_stop", time_ms=start, event_type="INTERVAL_END"),
        mllog_line("run_start", time_ms=start, event_type="INTERVAL_START"),
    ]
    for i in range(1, evals + 1):
        t, at = start + int(i * minutes_per_eval * 60_000), {"samples_count": i * EVERY}
        loss = 0.5859 if i == evals else 0.59 + 0.3 / i
        lines += [
            mllog_line(
                "block_start",
                time_ms=t - 1000,
                metadata={"samples_count": (i - 1) * EVERY},
                event_type="INTERVAL_START",
            ),
            mllog_line("block_stop", time_ms=t, metadata=at, event_type="INTERVAL_END"),
            mllog_line("eval_start", time_ms=t, metadata=at, event_type="INTERVAL_START"),
            mllog_line("eval_accuracy", loss, time_ms=t, metadata=at),
            mllog_line("eval_stop", time_ms=t, metadata=at, event_type="INTERVAL_END"),
        ]
    stop = start + int(evals * minutes_per_eval * 60_000)
    lines.append(
        mllog_line(
            "run_stop",
            time_ms=stop,
            metadata={"status": "success", "samples_count": evals * EVERY},
            event_type="INTERVAL_END",
        )
    )
    return lines


def test_a_flux1_set_scores_with_its_rcp(tmp_path):
    # the GBS 2048 RCP's own samples to converge (rcps_flux1.json), in evaluations of 262,144
    evals = [36, 39, 40, 42, 41, 47, 40, 38, 40, 36]
    for i, n in enumerate(evals):
        write_log(tmp_path / f"result_{i}.txt", flux_log(n, seed=i))
    s = score_logdir(tmp_path)
    assert s["ruleset"] == "6.1.0"
    assert all(run["compliant"] for run in s["runs"]), [r["verdict"] for r in s["runs"]]
    assert s["rcp"]["passed"]
    minutes = sorted(n * 2.05 for n in evals)[1:-1]  # olympic: the fastest and the slowest dropped
    assert s["score_minutes"] == pytest.approx(statistics.mean(minutes) * s["normalization_factor"], rel=1e-6)
