"""The scorer counts only finished runs: a log its launcher still holds (flock) is left out and named, and a
summary that counts a run this scoring did not is kept."""

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scoring.scoring_logs import bert_log_lines, write_log
from training.scoring.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def test_a_log_still_held_by_its_launcher_is_not_counted(tmp_path, capsys):
    write_log(tmp_path / "bert_x_1.log", bert_log_lines(minutes=2.0, target=0.3, evals=[(100, 0.31)]))
    running = tmp_path / "bert_x_2.log"
    write_log(running, bert_log_lines(drop=("run_stop", "block_stop", "train_samples")))  # half-written
    with open(running, "r+b") as held:  # what the launcher holds while the run writes its log
        fcntl.flock(held, fcntl.LOCK_EX)
        assert main([str(tmp_path)]) == 0  # the finished run converged; the other is not yet a failure
    s = json.loads((tmp_path / "summary.json").read_text())
    assert [row["log"] for row in s["runs"]] == ["bert_x_1.log"] and s["running"] == ["bert_x_2.log"]
    assert "Still running, not counted: bert_x_2.log" in capsys.readouterr().out

    # once ended (the lock dropped), the next scoring counts it: as the incomplete run it is
    assert main([str(tmp_path)]) == 1
    s = json.loads((tmp_path / "summary.json").read_text())
    assert [row["log"] for row in s["runs"]] == ["bert_x_1.log", "bert_x_2.log"] and s["running"] == []


def test_only_running_logs_is_no_summary(tmp_path, capsys):
    write_log(tmp_path / "bert_x_1.log", bert_log_lines(drop=("run_stop",)))
    with open(tmp_path / "bert_x_1.log", "r+b") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert main([str(tmp_path)]) == 2
    assert "no finished run: bert_x_1.log still running" in capsys.readouterr().err
    assert not (tmp_path / "summary.json").exists()


def test_a_summary_counting_a_run_this_scoring_missed_is_kept(tmp_path, capsys):
    """A scoring that read the folder while run 2 was still going must not replace the summary that a later
    scoring (run 2's launcher's) wrote with run 2 in it."""
    for i in (1, 2):
        write_log(tmp_path / f"bert_x_{i}.log", bert_log_lines(minutes=i, target=0.3, evals=[(100, 0.31)]))
    assert main([str(tmp_path)]) == 0  # the newer scoring: both runs
    newer = (tmp_path / "summary.md").read_text()
    with open(tmp_path / "bert_x_2.log", "r+b") as held:  # the older scoring's view: run 2 going
        fcntl.flock(held, fcntl.LOCK_EX)
        assert main([str(tmp_path)]) == 0
    assert (tmp_path / "summary.md").read_text() == newer
    out = capsys.readouterr().out
    assert f"kept {tmp_path / 'summary.md'}: it counts bert_x_2.log, which ended after" in out
    assert json.loads((tmp_path / "summary.json").read_text())["runs"][1]["log"] == "bert_x_2.log"


def test_one_scoring_of_a_folder_at_a_time(tmp_path):
    """A scoring waits for the one in progress (a lock on the folder) before it reads the logs."""
    write_log(tmp_path / "bert_x_1.log", bert_log_lines(minutes=2.0, target=0.3, evals=[(100, 0.31)]))
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a scoring in progress
        cmd = [sys.executable, "-m", "training.scoring", str(tmp_path)]
        later = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            later.wait(timeout=2)  # still waiting for the lock
        assert not (tmp_path / "summary.json").exists()
    finally:
        os.close(fd)
    assert later.wait(timeout=60) == 0, later.stderr.read()
    assert (tmp_path / "summary.json").exists()
