"""A demo run's summary as a new user reads it: the demo's own target above its figures (not
MLPerf's alone), throughput with its unit; `--package` says first that the package checker will reject a
demo and why, and its output carries no numpy warning and no "mean epochs: nan"."""

from __future__ import annotations

import warnings

import pytest

from tests.scoring.scoring_logs import bert_log_lines, write_log
from training.scoring.__main__ import main

DEMO_EVALS = ((1_000, 0.05), (2_000, 0.13))  # a CPU demo's masked-LM accuracy, target 0.12


def demo_logs(folder, runs: int = 2):
    folder.mkdir()
    for i in range(1, runs + 1):
        lines = bert_log_lines(minutes=1.0 + i / 10, target=0.12, evals=DEMO_EVALS, throughput=55.5, seed=i)
        write_log(folder / f"bert_CPU_1x1x10_{i}.log", lines)
    return folder


def test_the_summary_of_a_demo_shows_its_own_target_and_units(tmp_path, capsys):
    assert main([str(demo_logs(tmp_path / "logs"))]) == 0
    out = capsys.readouterr().out
    assert "these runs' target eval_accuracy 0.12 (a demo's; MLPerf's is 0.72) (higher is better)" in out
    assert "| throughput (samples/s) |" in out and "| 55.5 |" in out


@pytest.mark.slow  # the package checker and the doctor (torch): seconds
def test_package_on_a_demo_says_first_why_the_checker_rejects_it(tmp_path, capsys):
    logs = demo_logs(tmp_path / "logs")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's "Mean of empty slice" fails the test
        assert main([str(logs), "--out", str(tmp_path / "summary"), "--package", str(tmp_path / "pkg")]) == 1
    printed = capsys.readouterr()
    out = printed.out
    note = out.index(
        "Note: the package checker will reject this package: the runs are demos "
        "(target_accuracy 0.12, not bert's 0.72)"
    )
    assert note < out.index("## Package") and "2 run(s), where a submission has exactly 10" in out
    assert "nan" not in out and "RuntimeWarning" not in printed.err
