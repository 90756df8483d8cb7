"""Test helpers: write MLLOG logs by formatting JSON, and copy the official result sets."""

import json
import shutil
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "data" / "mlperf_results"
T0 = 1_793_491_200_000  # ms: 2026-11-01, after the last round of each benchmark: new runs (rounds.py)


def mllog_line(key, value=None, time_ms=T0, metadata=None, event_type="POINT_IN_TIME"):
    record = {
        "namespace": "",
        "time_ms": time_ms,
        "event_type": event_type,
        "key": key,
        "value": value,
        "metadata": {"file": "test.py", "lineno": 1, **(metadata or {})},
    }
    return ":::MLLOG " + json.dumps(record)


def bert_log_lines(
    minutes=5.0,
    status="success",
    evals=((1_000_000, 0.5), (2_000_000, 0.73)),
    target=None,
    benchmark="bert",
    gbs=768,
    throughput=4000.0,
    drop=(),
    seed=1234,
):
    """A complete closed-division BERT log (passes training_5.0.0) ending in run_stop with `status`.
    `drop` removes the lines of those keys; eval metadata carries both epoch_num and samples_count."""
    run_start = T0 + 60_000
    lines = [
        mllog_line("submission_benchmark", benchmark),
        mllog_line("submission_org", "test"),
        mllog_line("submission_division", "closed"),
        mllog_line("submission_status", "onprem"),
        mllog_line("submission_platform", "1xCPU"),
        mllog_line("cache_clear", True),
        mllog_line("init_start", event_type="INTERVAL_START"),
        mllog_line("global_batch_size", gbs),
        mllog_line("gradient_accumulation_steps", 1),
        mllog_line("seed", seed),
    ]
    hparams = [
        "opt_base_learning_rate",
        "opt_lamb_epsilon",
        "opt_learning_rate_training_steps",
        "opt_learning_rate_warmup_steps",
        "num_warmup_steps",
        "start_warmup_step",
        "opt_lamb_beta_1",
        "opt_lamb_beta_2",
        "opt_lamb_weight_decay_rate",
    ]
    lines += [mllog_line(key, 0.5) for key in hparams]
    lines.append(mllog_line("eval_samples", 10000))
    if target is not None:
        lines.append(mllog_line("target_accuracy", target))
    lines += [
        mllog_line("init_stop", time_ms=run_start, event_type="INTERVAL_END"),
        mllog_line("run_start", time_ms=run_start, event_type="INTERVAL_START"),
        mllog_line(
            "block_start",
            time_ms=run_start,
            metadata={"first_epoch_num": 1, "epoch_count": 1},
            event_type="INTERVAL_START",
        ),
    ]
    for i, (samples, accuracy) in enumerate(evals, 1):
        t = run_start + int(minutes * 60000 * i / len(evals))
        meta = {"epoch_num": samples, "samples_count": samples}
        lines += [
            mllog_line("eval_start", time_ms=t, metadata=meta, event_type="INTERVAL_START"),
            mllog_line("eval_stop", time_ms=t, metadata=meta, event_type="INTERVAL_END"),
            mllog_line("eval_accuracy", accuracy, time_ms=t, metadata=meta),
            mllog_line("tracked_stats", {"throughput": throughput}, time_ms=t, metadata={"step": i}),
        ]
    stop = run_start + int(minutes * 60000)
    lines += [
        mllog_line("block_stop", time_ms=stop, metadata={"first_epoch_num": 1}, event_type="INTERVAL_END"),
        mllog_line("train_samples", evals[-1][0] if evals else gbs, time_ms=stop),
        mllog_line("run_stop", time_ms=stop, metadata={"status": status}, event_type="INTERVAL_END"),
    ]
    return [line for line in lines if json.loads(line[len(":::MLLOG ") :])["key"] not in drop]


def write_log(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def copy_official(subpath, tmp_path):
    """Copy one official result set (a path under tests/data/mlperf_results) into tmp_path: nothing we run
    may write next to the test data."""
    return Path(shutil.copytree(RESULTS / subpath, tmp_path / Path(subpath).name))
