"""A run's own outcome (training/common/outcome.py), classified where the trainer ends and
read back by the launcher and the scorer, since torchrun's exit status says only "a worker failed"."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from training.common import outcome
from training.common.config import ConfigError
from training.common.outcome import Outcome, classify

ROOT = Path(__file__).resolve().parents[1]


class ShardError(outcome.DataError):
    """As a benchmark's data module defines its own."""


def wrapped_disk_full() -> Exception:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/cache/index.npy")
        except OSError as err:
            raise ShardError(f"INDEX_CACHE_DIR /cache is not writable ({err})") from None
    except ShardError as err:
        return err


@pytest.mark.parametrize(
    "err, status, described",
    [
        (
            ShardError("/data/part_00003: cannot read HDF5"),
            "data_error",
            "data error: /data/part_00003: cannot read HDF5",
        ),
        (FileNotFoundError(2, "No such file or directory", "/data/x.bin"), "data_error", "data error: "),
        (wrapped_disk_full(), "disk_full", "disk full: no space left on device writing /cache/index.npy"),
        (ConfigError("LR=x: not a number"), "config_error", "config error: LR=x: not a number"),
        (KeyboardInterrupt(), "interrupted", "interrupted: SIGINT"),
        (outcome.Interrupted(signal.SIGTERM), "interrupted", "interrupted: SIGTERM"),
        (RuntimeError("NCCL timeout"), "crashed", "crashed: RuntimeError: NCCL timeout"),
    ],
)
def test_each_ending_is_named(err, status, described):
    got = classify(err)
    assert got.status == status and got.describe().startswith(described)


def write_outcome(logdir: Path, tag: str, status: str, rank: int, at: float, detail: str = "") -> None:
    path = outcome.outcome_path(logdir, tag, rank)
    path.write_text(json.dumps({"status": status, "detail": detail, "rank": rank, "time": at}))


def test_the_first_failure_of_any_rank_is_the_cause(tmp_path):
    log = tmp_path / "bert_X_1.log"
    assert outcome.read(log) is None
    write_outcome(tmp_path, "bert_X_1", "converged", 0, 10.0)
    write_outcome(tmp_path, "bert_X_10", "crashed", 0, 1.0)  # another run's
    assert outcome.read(log) == Outcome("converged")
    write_outcome(tmp_path, "bert_X_1", "interrupted", 0, 12.0, "SIGTERM")
    write_outcome(tmp_path, "bert_X_1", "data_error", 3, 11.0, "part_00003 unreadable")
    write_outcome(tmp_path, "bert_X_1", "crashed", 5, 11.5, "RuntimeError: peer gone")
    assert outcome.read(log).describe() == "data error: part_00003 unreadable"
    (tmp_path / "bert_X_1.outcome.rank7.json").write_text("{")
    with pytest.raises(ValueError, match=r"bert_X_1.outcome.rank7.json: not a run outcome"):
        outcome.read(log)


def test_cli(tmp_path, capsys):
    log = tmp_path / "bert_X_1.log"
    assert outcome.main([str(log)]) == 1
    assert "no bert_X_1.outcome*.json beside" in capsys.readouterr().err
    write_outcome(tmp_path, "bert_X_1", "disk_full", 0, 1.0, "no space left on device writing /ckpt/a")
    assert outcome.main([str(log)]) == 0
    assert capsys.readouterr().out == "disk full: no space left on device writing /ckpt/a\n"


ENTRY = """
import sys, time
from training.common import outcome
def main():
    print("started", flush=True)
    if sys.argv[1] == "sleep":
        time.sleep(60)
    end = outcome.ended(False, "eval_accuracy 0.5 (target 0.72) at 80 samples")
    if sys.argv[1] == "teardown":  # the MLPerf loop's end, then its barrier and process-group teardown
        print("ended", flush=True)
        time.sleep(60)
    return end
outcome.run(main, "toy")
"""


def run_entry(tmp_path: Path, how: str, rank: str = "0") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LOGDIR": str(tmp_path), "RUN_TAG": "toy_1", "RANK": rank}
    return subprocess.Popen(
        [sys.executable, "-c", ENTRY, how],
        env=env,
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_a_run_writes_its_end_and_exits_with_its_status(tmp_path):
    proc = run_entry(tmp_path, "end")
    assert proc.wait(timeout=60) == 1
    assert outcome.read(tmp_path / "toy_1.log").describe() == (
        "not converged: eval_accuracy 0.5 (target 0.72) at 80 samples"
    )
    (tmp_path / "rank1").mkdir()
    other = run_entry(tmp_path / "rank1", "end", rank="1")
    assert other.wait(timeout=60) == 1  # a rank other than 0 writes only what it raised
    assert list((tmp_path / "rank1").iterdir()) == []


def test_sigterm_is_written_as_interrupted(tmp_path):
    proc = run_entry(tmp_path, "sleep")
    assert proc.stdout.readline() == "started\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert "toy: interrupted: SIGTERM" in proc.stderr.read()
    record = json.loads((tmp_path / "toy_1.outcome.json").read_text())
    assert record["status"] == "interrupted" and record["rank"] == 0 and record["time"] <= time.time()
    assert [p.name for p in tmp_path.iterdir()] == ["toy_1.outcome.json"]  # no temporary file left


def test_sigint_is_named_and_the_first_signal_wins(tmp_path):
    """A Ctrl-C reaches the trainer as SIGINT (the launcher passes on the signal it got): the outcome names
    it, and a SIGTERM right after (torchrun's or srun's echo) neither replaces it nor cuts its writing."""
    proc = run_entry(tmp_path, "sleep")
    assert proc.stdout.readline() == "started\n"
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGINT
    assert "toy: interrupted: SIGINT" in proc.stderr.read()
    assert outcome.read(tmp_path / "toy_1.log").describe() == "interrupted: SIGINT"


@pytest.mark.parametrize("rank", ["0", "3"])
def test_a_sigterm_after_the_run_s_end_is_the_teardown_s_not_the_run_s(tmp_path, rank):
    """torchrun stops the other ranks when the first exits non-zero (every rank of a run that did not
    converge does): rank 0 writes the run's end, another rank nothing, and neither says "interrupted"."""
    proc = run_entry(tmp_path, "teardown", rank=rank)
    assert proc.stdout.readline() == "started\n" and proc.stdout.readline() == "ended\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 1  # not converged
    said = proc.stderr.read()
    assert "toy: SIGTERM in the teardown, after the run's end" in said and "interrupted" not in said
    if rank == "0":
        assert outcome.read(tmp_path / "toy_1.log").describe() == (
            "not converged: eval_accuracy 0.5 (target 0.72) at 80 samples"
        )
    assert [p.name for p in tmp_path.iterdir()] == (["toy_1.outcome.json"] if rank == "0" else [])


def test_a_torchrun_worker_skips_the_interpreters_teardown(tmp_path):
    """A torchrun worker (LOCAL_RANK set) ends with its outcome's status once everything is written, without
    the exit handlers and C++ destructors that have aborted converged ranks; what it printed is flushed."""
    code = (
        "import atexit, sys\n"
        "from training.common import outcome\n"
        "atexit.register(lambda: print('teardown ran', flush=True))\n"
        "print('unflushed line', end='')\n"
        "outcome.run(lambda: outcome.ended(True, 'converged'), 'toy')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_RANK"}
    env.update(PYTHONPATH=str(ROOT), LOGDIR=str(tmp_path), RUN_TAG="toy_1")
    for local_rank, teardown in (("0", False), (None, True)):
        run_env = {**env, "LOCAL_RANK": local_rank} if local_rank else env
        done = subprocess.run(
            [sys.executable, "-c", code], env=run_env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("unflushed line") and ("teardown ran" in done.stdout) == teardown
        assert outcome.read(tmp_path / "toy_1.log").status == "converged"
