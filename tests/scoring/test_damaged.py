"""The scorer counts what MLCommons' result summarizer counts. A run that fails the
compliance checker, and every damaged log (empty, garbled, a null value, a missing time), is listed with its
reason and counted as not converged; none of them stops the summary, which is written whole or not at all."""

import json

import pytest

from tests.scoring.scoring_logs import bert_log_lines, mllog_line, write_log
from training.scoring import report
from training.scoring.__main__ import main
from training.scoring.score import score_logdir


def three_good(tmp_path, minutes=(4.0, 2.0, 3.0)):
    for i, m in enumerate(minutes):
        write_log(tmp_path / f"result_{i}.txt", bert_log_lines(minutes=m))


def row(summary, name):
    return next(r for r in summary["runs"] if r["log"] == name)


def test_a_run_that_fails_the_compliance_checker_is_not_counted(tmp_path):
    three_good(tmp_path)
    write_log(tmp_path / "result_3.txt", bert_log_lines(minutes=1.0, drop=("opt_lamb_epsilon",)))
    s = score_logdir(tmp_path)
    bad = row(s, "result_3.txt")
    assert (bad["compliant"], bad["converged"], bad["minutes"]) == (False, False, pytest.approx(1.0))
    assert bad["verdict"].startswith("fails the compliance checker (training_5.0.0)")
    assert "opt_lamb_epsilon" in bad["verdict"]
    # summarizer: the non-compliant run is the one dropped as slowest, the fastest converged (2.0) the other
    assert s["mean_minutes"] == pytest.approx(3.5) and not s["ok"]


@pytest.mark.parametrize(
    "name, lines, reason",
    [
        ("empty", [], "empty file"),
        ("no_mllog", ["Beginning trial 1 of 1", "Traceback: ..."], "no :::MLLOG lines"),
        (
            "null_accuracy",
            [mllog_line("eval_accuracy", None, metadata={"epoch_num": 5})],
            "eval_accuracy: value None is not a number",
        ),
        ("garbled", [':::MLLOG {"key": "eval_acc'], "not valid JSON"),
        (
            "bad_target",
            [mllog_line("target_accuracy", "high")],
            "target_accuracy: value 'high' is not a number",
        ),
    ],
)
def test_a_damaged_log_is_listed_with_its_reason(tmp_path, name, lines, reason):
    three_good(tmp_path)
    good = bert_log_lines(minutes=1.0)
    damaged = lines if name in ("empty", "no_mllog") else [*good[:-3], *lines, *good[-3:]]
    write_log(tmp_path / "bert_x_4.log", damaged)
    s = score_logdir(tmp_path)
    assert len(s["runs"]) == 4, [r["log"] for r in s["runs"]]
    bad = row(s, "bert_x_4.log")
    assert not bad["converged"] and reason in bad["verdict"], bad["verdict"]
    assert bad["verdict"].startswith("damaged log: ")
    assert any(bad["log"] in note and reason in note for note in s["notes"]), s["notes"]
    assert s["mean_minutes"] == pytest.approx(3.5)  # 2, 3, 4 and the damaged run dropped as the slowest


def test_run_stop_without_time_and_only_damaged_logs(tmp_path):
    lines = bert_log_lines()
    stop = json.loads(lines[-1].split(":::MLLOG ", 1)[1])
    del stop["time_ms"]
    write_log(tmp_path / "bert_x_1.log", [*lines[:-1], ":::MLLOG " + json.dumps(stop)])
    (tmp_path / "bert_x_2.log").write_text("")
    assert main([str(tmp_path)]) == 1
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["benchmark"] == "bert"  # from the launcher's file names: no log says it whole
    assert "run_stop: no time_ms" in s["runs"][0]["verdict"] and "empty file" in s["runs"][1]["verdict"]
    assert s["mean_minutes"] is None


def test_an_official_score_needs_the_benchmark_s_run_count(tmp_path):
    three_good(tmp_path)
    s = score_logdir(tmp_path)
    assert s["mean_minutes"] == pytest.approx(3.0) and s["score_minutes"] is None
    assert any("3 run(s): an official bert score needs exactly 10" in n for n in s["notes"]), s["notes"]


def test_the_summary_is_written_whole_or_not_at_all(tmp_path, monkeypatch, capsys):
    three_good(tmp_path)
    assert main([str(tmp_path)]) == 0
    before = {p.name: p.read_bytes() for p in tmp_path.glob("summary.*")}

    def broken_plot(summary, path):
        path.write_bytes(b"half a png")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "plot_eval_accuracy", broken_plot)
    write_log(tmp_path / "result_3.txt", bert_log_lines(minutes=1.0))
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"could not write {tmp_path / 'eval_accuracy.png'}" in err and "No space left" in err
    assert {p.name: p.read_bytes() for p in tmp_path.glob("summary.*")} == before
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []


def test_a_failed_run_is_named_by_its_outcome_file(tmp_path):
    """The trainer's own outcome says why a run did not converge."""
    three_good(tmp_path)
    write_log(tmp_path / "bert_x_4.log", bert_log_lines(drop=("run_stop",)))
    record = {"status": "data_error", "detail": "part_00003 unreadable", "rank": 0, "time": 1.0}
    (tmp_path / "bert_x_4.outcome.json").write_text(json.dumps(record))
    write_log(tmp_path / "bert_x_5.log", bert_log_lines(status="aborted"))
    (tmp_path / "bert_x_5.outcome.json").write_text("{")
    s = score_logdir(tmp_path)
    assert row(s, "bert_x_4.log")["verdict"] == "data error: part_00003 unreadable"
    assert row(s, "bert_x_4.log")["outcome"] == {"status": "data_error", "detail": "part_00003 unreadable"}
    assert row(s, "bert_x_5.log")["verdict"] == "not converged (aborted)"
    assert any("bert_x_5.outcome.json: not a run outcome" in note for note in s["notes"]), s["notes"]


def test_only_run_logs_without_mllog_lines_are_runs(tmp_path):
    three_good(tmp_path)
    (tmp_path / "bert_x_4.log").write_text(
        "Beginning trial 4 of 4\n"
    )  # a run that died before its first line
    (tmp_path / "nccl_debug_0.log").write_text("NCCL INFO ...\n")  # not a run's
    runs = [r["log"] for r in score_logdir(tmp_path)["runs"]]
    assert runs == ["bert_x_4.log", "result_0.txt", "result_1.txt", "result_2.txt"]
