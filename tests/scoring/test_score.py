import json
import logging

import pytest

from tests.scoring.scoring_logs import RESULTS, bert_log_lines, mllog_line, write_log
from training.scoring.__main__ import main
from training.scoring.compliance import RULES_ROOT
from training.scoring.rules import BENCHMARKS, MLPERF_LOGGING_VERSION
from training.scoring.runs import find_logs
from training.scoring.score import olympic_mean, score_logdir

# (set, ruleset, olympic mean, RCP factor, score) as tests/data/mlperf_results/README.md gives them
OFFICIAL = [
    (
        "v5.1/AMD/MI355X_EPYC_9575F_pytorch/llama2_70b_lora",
        "5.1.0",
        10.15056875,
        1.0033670033670032,
        10.184746,
    ),
    ("v5.1/AMD/MI355X_EPYC_9575F_pytorch/llama31_8b", "5.1.0", 99.3101375, 1.004011735824202, 99.708544),
    ("v4.1/NVIDIA/eos_ngc23.04_pytorch/bert", "4.1.0", 5.46880625, 1.0, 5.46880625),
    ("v4.1/NVIDIA/h200_ngc24.09_nemo/llama2_70b_lora", "4.1.0", 24.034779167, 1.0033670033670032, 24.115704),
]


@pytest.mark.parametrize("subpath, ruleset, mean, factor, score", OFFICIAL)
def test_official_scores_reproduced(subpath, ruleset, mean, factor, score):
    handlers = logging.getLogger().handlers[:]
    s = score_logdir(RESULTS / subpath, ruleset)
    assert logging.getLogger().handlers == handlers  # the checkers' root-logger output was captured
    assert any("RCP test" in line or "Submission mean epochs" in line for line in s["rcp"]["log"])
    assert s["valid_mlperf"] and s["ok"] and len(s["runs"]) == 10
    assert s["mean_minutes"] == pytest.approx(mean, rel=1e-6)
    assert s["rcp"]["passed"], s["rcp"]
    assert s["rcp"]["normalization_factor"] == pytest.approx(factor, rel=1e-12)
    assert s["score_minutes"] == pytest.approx(score, rel=1e-6)
    assert all(run["compliant"] for run in s["runs"])


def test_official_per_run_values():
    s = score_logdir(RESULTS / OFFICIAL[2][0], "4.1.0")  # the README's per-run table, result_0 and result_8
    run0, run8 = s["runs"][0], s["runs"][8]
    assert (run0["log"], round(run0["minutes"], 4), run0["samples_to_converge"]) == (
        "result_0.txt",
        5.7950,
        2698169,
    )
    assert (run8["log"], round(run8["minutes"], 4), run8["samples_to_converge"]) == (
        "result_8.txt",
        4.5143,
        2100629,
    )
    assert run0["global_batch_size"] == 768 and run0["status"] == "success"


def test_cli_writes_summary_elsewhere_and_leaves_data_alone(tmp_path, capsys):
    logdir = RESULTS / OFFICIAL[0][0]
    before = sorted(p.name for p in logdir.iterdir())
    assert main([str(logdir), "--out", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in logdir.iterdir()) == before
    assert {p.name for p in (tmp_path / "out").iterdir()} == {
        "summary.md",
        "summary.json",
        "eval_accuracy.png",
    }
    assert "**score: 10.184746 min**" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["score_minutes"] == pytest.approx(
        10.184746
    )


def test_rules_pinned():
    assert MLPERF_LOGGING_VERSION == "4.1.68"
    assert {
        (r.name, r.ruleset, r.target, r.higher_is_better, r.samples_key, r.runs) for r in BENCHMARKS.values()
    } == {
        ("bert", "5.0.0", 0.720, True, "epoch_num", 10),
        ("llama31_8b", "6.1.0", 3.3, False, "samples_count", 10),
        ("llama2_70b_lora", "6.1.0", 0.925, False, "samples_count", 10),
        ("flux1", "6.1.0", 0.586, False, "samples_count", 10),
    }
    # every round listed has the benchmark's rules in the pinned mlperf-logging
    for b in BENCHMARKS.values():
        for ruleset in b.rulesets:
            assert (RULES_ROOT / f"training_{ruleset}" / f"closed_{b.name}.yaml").is_file(), (b.name, ruleset)


def test_olympic_mean():
    times = [5.0, 1.0, 3.0, 4.0, 2.0]
    assert olympic_mean(times)[0] == pytest.approx(3.0)  # drops 1.0 and 5.0
    # a run that did not converge is the slowest one dropped: the fastest and it go, the rest count
    assert olympic_mean([5.0, 1.0, None, 4.0, 2.0])[0] == pytest.approx((2.0 + 4.0 + 5.0) / 3)
    mean, how = olympic_mean([5.0, None, 3.0, None, 2.0])
    assert mean is None and "2 runs did not converge" in how
    assert olympic_mean([2.0, 4.0]) == (3.0, "plain mean of 2 run(s): an olympic mean needs at least 3")
    assert olympic_mean([2.0, None])[0] is None
    assert olympic_mean([])[0] is None


def test_demo_runs_are_loudly_not_valid(tmp_path, capsys):
    for i, minutes in enumerate([3.0, 1.0, 2.0]):
        write_log(
            tmp_path / f"bert_cpu_{i}.log", bert_log_lines(minutes=minutes, target=0.3, evals=[(100, 0.31)])
        )
    assert main([str(tmp_path)]) == 0  # all converged (to the demo target)
    out = capsys.readouterr().out
    assert "NOT A VALID MLPerf RESULT" in out and "**score: - min** (no valid MLPerf score)" in out
    s = json.loads((tmp_path / "summary.json").read_text())
    assert not s["valid_mlperf"] and s["score_minutes"] is None and s["mean_minutes"] == pytest.approx(2.0)
    assert s["rcp"]["passed"] is None
    assert all(run["compliant"] for run in s["runs"])  # against the patched rules
    assert any("an official bert score needs exactly 10" in note for note in s["notes"])
    assert (tmp_path / "eval_accuracy.png").stat().st_size > 0


def test_incomplete_and_failed_runs_are_counted(tmp_path):
    write_log(tmp_path / "result_0.txt", bert_log_lines(minutes=4.0))
    write_log(tmp_path / "result_1.txt", bert_log_lines(minutes=2.0))
    write_log(tmp_path / "result_2.txt", bert_log_lines(minutes=3.0))
    crashed = bert_log_lines(minutes=1.0, drop=("run_stop", "block_stop", "train_samples"))  # no run_stop
    write_log(tmp_path / "result_3.txt", [*crashed, crashed[-1][:40]])  # and a line cut off mid-write
    s = score_logdir(tmp_path)
    run = s["runs"][3]
    assert (run["status"], run["converged"], run["minutes"]) == ("incomplete/crashed", False, None)
    assert run["samples_to_converge"] is None and run["evals"] == [[1_000_000, 0.5], [2_000_000, 0.73]]
    # fastest (2.0) and the crashed run dropped
    assert not s["ok"] and s["mean_minutes"] == pytest.approx(3.5)
    cut = len(crashed) + 1
    assert run["verdict"].startswith(f"damaged log: line {cut}: not valid JSON (")
    assert any(note.startswith(f"result_3.txt: damaged log: line {cut}") for note in s["notes"])
    # the RCP check ran and failed: 2,000,000 samples is far fewer than BERT's RCPs allow at batch 768
    assert (s["rcp"]["passed"], s["rcp"]["message"], s["score_minutes"]) == (False, "RCP Interpolation", None)

    write_log(tmp_path / "result_4.txt", bert_log_lines(minutes=2.5, status="aborted"))
    s = score_logdir(tmp_path)
    assert s["runs"][4]["status"] == "aborted" and s["mean_minutes"] is None
    assert "2 runs did not converge" in s["mean_method"]
    assert main([str(tmp_path), "--out", str(tmp_path / "out")]) == 1


def test_a_run_without_an_evaluation_says_so(tmp_path):
    """A log with no eval_accuracy has no accuracy to name: its verdict says no evaluation ran, from the log
    alone and from the trainer's own outcome (the loop's words), never an accuracy of nan."""
    write_log(tmp_path / "bert_x_1.log", bert_log_lines(status="aborted", evals=()))
    write_log(tmp_path / "bert_x_2.log", bert_log_lines(status="aborted", evals=()))
    detail = "no evaluation ran (target eval_accuracy 0.72) after 1110 samples"
    record = {"status": "not_converged", "detail": detail, "rank": 0, "time": 1.0}
    (tmp_path / "bert_x_2.outcome.json").write_text(json.dumps(record))
    assert main([str(tmp_path)]) == 1
    s = json.loads((tmp_path / "summary.json").read_text())
    assert [(r["verdict"], r["last_eval_accuracy"]) for r in s["runs"]] == [
        ("not converged (aborted): no evaluation ran", None),
        (f"not converged: {detail}", None),
    ]
    assert "nan" not in (tmp_path / "summary.md").read_text()


def test_missing_run_stop_exit_status(tmp_path):
    write_log(tmp_path / "result_0.txt", bert_log_lines(drop=("run_stop",)))
    assert main([str(tmp_path)]) == 1
    assert json.loads((tmp_path / "summary.json").read_text())["runs"][0]["status"] == "incomplete/crashed"


def test_llama_samples_unit(tmp_path):
    evals = [(3072, 0.93), (3456, 0.92)]
    write_log(
        tmp_path / "result_0.txt", bert_log_lines(benchmark="llama2_70b_lora", evals=evals, minutes=10.0)
    )
    s = score_logdir(tmp_path)
    assert s["benchmark"] == "llama2_70b_lora" and s["ruleset"] == "6.1.0"
    assert s["runs"][0]["samples_to_converge"] == 3456 and s["runs"][0]["last_eval_accuracy"] == 0.92


# The MLLOG lines the seed (shared/seeds/000_c73874122d95eaad.txt) shows for one BERT run on 8x MI300X,
# verbatim. We add only the submission_benchmark line (first), which the scorer needs to know the benchmark.
SEED_LOG = """\
:::MLLOG {"namespace": "", "time_ms": 1744838717000, "event_type": "POINT_IN_TIME", "key": "submission_benchmark", "value": "bert", "metadata": {"file": "added by the test", "lineno": 0}}
:::MLLOG {"namespace": "", "time_ms": 1744838717800, "event_type": "INTERVAL_START", "key": "run_start", "value": null, "metadata": {"file": "/workspace/code/training/run_pretraining.py", "lineno": 1706}}
:::MLLOG {"namespace": "", "time_ms": 1744839123410, "event_type": "POINT_IN_TIME", "key": "eval_accuracy", "value": 0.719775378704071, "metadata": {"file": "/workspace/code/training/run_pretraining.py", "lineno": 1984, "epoch_num": 2030855}}
:::MLLOG {"namespace": "", "time_ms": 1744839180558, "event_type": "POINT_IN_TIME", "key": "eval_accuracy", "value": 0.7209873199462891, "metadata": {"file": "/workspace/code/training/run_pretraining.py", "lineno": 1984, "epoch_num": 2320253}}
:::MLLOG {"namespace": "", "time_ms": 1744839180559, "event_type": "INTERVAL_END", "key": "block_stop", "value": null, "metadata": {"file": "/workspace/code/training/run_pretraining.py", "lineno": 2102, "first_epoch_num": 1}}
:::MLLOG {"namespace": "", "time_ms": 1744839180559, "event_type": "INTERVAL_END", "key": "epoch_stop", "value": null, "metadata": {"file": "/workspace/code/training/run_pretraining.py", "lineno": 2105, "epoch_num": 2320253}}
:::MLLOG {"namespace": "", "time_ms": 1744839180559, "event_type": "POINT_IN_TIME", "key": "train_samples", "value": 2320253, "metadata": {"file": "/workspace/code/training/run_pretraining.py", "lineno": 2107}}
:::MLLOG {"namespace": "", "time_ms": 1744839180559, "event_type": "POINT_IN_TIME", "key": "eval_samples", "value": 10000, "metadata": {"file": "/workspace/code/training/run_pretraining.py", "lineno": 2110}}
:::MLLOG {"namespace": "", "time_ms": 1744839180560, "event_type": "INTERVAL_END", "key": "run_stop", "value": null, "metadata": {"file": "/workspace/code/training/run_pretraining.py", "lineno": 2113, "status": "success"}}
:::MLLOG {"namespace": "", "time_ms": 1744839180560, "event_type": "POINT_IN_TIME", "key": "tracked_stats", "value": {"throughput": 5013.945143642021, "epoch_num": 2320253}, "metadata": {"file": "/workspace/code/training/run_pretraining.py", "lineno": 2160, "step": [2, 3021], "train_time": 7.838831726710001}}
"""  # noqa: E501


def test_seed_log(tmp_path):
    (tmp_path / "bert_MI300X_1x8x48_1.log").write_text(
        "Beginning trial 1 of 1\n" + SEED_LOG + "finished phase2\n"
    )
    s = score_logdir(tmp_path)
    run = s["runs"][0]
    assert run["minutes"] == pytest.approx(7.7127, abs=1e-4)  # (1744839180560 - 1744838717800) / 60000
    assert run["samples_to_converge"] == 2320253 and run["last_eval_accuracy"] == pytest.approx(0.7209873)
    assert run["throughput"] == pytest.approx(5013.9, abs=0.1) and run["status"] == "success"
    # the seed shows only a few lines of the log: they fail the compliance checker, so the run does not count
    assert not run["compliant"] and run["verdict"].startswith("fails the compliance checker (training_5.0.0)")
    assert s["valid_mlperf"] and not s["ok"] and s["mean_minutes"] is None
    assert s["score_minutes"] is None and s["rcp"]["passed"] is None


def test_finds_only_logs(tmp_path):
    for name in [
        "result_10.txt",
        "result_9.txt",
        "bert_x_1.log",
        "bert_x_1.compliance.txt",
        "notes.md",
        "a.json",
    ]:
        write_log(tmp_path / name, [mllog_line("submission_benchmark", "bert")])
    (tmp_path / "stdout.txt").write_text("no mllog here\n")
    assert [p.name for p in find_logs(tmp_path)] == ["bert_x_1.log", "result_9.txt", "result_10.txt"]


def test_no_logs_and_mixed_benchmarks(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    error = f"error: {tmp_path}: no MLPerf logs (*.txt or *.log files with :::MLLOG lines)"
    assert capsys.readouterr().err == error + "\n"
    write_log(tmp_path / "result_0.txt", bert_log_lines())
    write_log(tmp_path / "result_1.txt", bert_log_lines(benchmark="llama31_8b"))
    with pytest.raises(ValueError, match="exactly one benchmark, found: bert, llama31_8b"):
        score_logdir(tmp_path)
