"""The MLLOG wrapper (`training.common.mllog`): every line names the code that asked for it, as the
published logs do (NVIDIA's and AMD's hyperparameter lines name their trainer's line, not a helper's)."""

from __future__ import annotations

import inspect
import json
import logging

from training.common.mllog import MLLogger

HERE = "tests/test_mllog.py"


def logged(caplog) -> list[dict]:
    return [json.loads(m.split(":::MLLOG ", 1)[1]) for m in caplog.messages if ":::MLLOG " in m]


def sources(events: list[dict]) -> list[tuple[str, str, int]]:
    return [(e["key"], e["metadata"]["file"], e["metadata"]["lineno"]) for e in events]


def test_each_line_names_the_line_that_asked_for_it(caplog):
    caplog.set_level(logging.INFO)
    log = MLLogger()
    line = inspect.currentframe().f_lineno
    log.hyperparameters({"opt_base_learning_rate": 0.1, "lora_alpha": 32})
    log.submission("bert", "org", "H100", 1)
    log.event("seed", 7)
    log.start("run_start")
    log.end("run_stop", metadata={"status": "aborted"})
    assert sources(logged(caplog)) == [
        ("opt_base_learning_rate", HERE, line + 1),
        ("lora_alpha", HERE, line + 1),
        *[
            (key, HERE, line + 2)
            for key in (
                "submission_benchmark",
                "submission_org",
                "submission_division",
                "submission_status",
                "submission_platform",
            )
        ],
        ("seed", HERE, line + 3),
        ("run_start", HERE, line + 4),
        ("run_stop", HERE, line + 5),
    ]


def log_for_my_caller(log: MLLogger) -> None:
    log.event("backend_attention", "sdpa", depth=1)
    log.hyperparameters({"global_batch_size": 8}, depth=1)


def test_a_helper_that_logs_for_its_caller_names_the_caller(caplog):
    caplog.set_level(logging.INFO)
    line = inspect.currentframe().f_lineno
    log_for_my_caller(MLLogger())
    assert sources(logged(caplog)) == [
        ("backend_attention", HERE, line + 1),
        ("global_batch_size", HERE, line + 1),
    ]


def test_other_ranks_log_nothing_but_remember_the_keys(caplog):
    caplog.set_level(logging.INFO)
    log = MLLogger(rank=1)
    log.hyperparameters({"train_samples": 3})
    assert logged(caplog) == [] and log.logged == {"train_samples"}
