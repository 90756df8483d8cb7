"""training.convergence: the verdicts on samples-to-target distributions, and its refusals. The
end-to-end tiny form runs in tests/llama/test_convergence.py (it needs the Llama demo data)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from training import convergence
from training.convergence import Outcome, compare

ROOT = Path(__file__).resolve().parents[1]


def outcomes(mode: str, samples: list[float | None]) -> list[Outcome]:
    return [Outcome(mode, i, Path(f"{mode}_{i}.log"), s is not None, s, 1.0) for i, s in enumerate(samples)]


REFERENCE = outcomes("reference", [1000, 1100, 1200, 1000, 1100])


def test_the_same_distribution_passes():
    verdict = compare(REFERENCE, outcomes("mode", [1100, 1000, 1200, 1100, 1000]))
    assert verdict["ok"] and verdict["verdict"].startswith("same convergence: 1.000x")


def test_a_mode_that_needs_more_samples_fails_by_how_much():
    verdict = compare(REFERENCE, outcomes("mode", [1500, 1600, 1500, 1700, 1600]))
    assert not verdict["ok"] and "46.9% more samples" in verdict["verdict"]


def test_a_mode_too_fast_for_the_rcp_check_fails():
    verdict = compare(REFERENCE, outcomes("mode", [500, 520, 510, 505, 515]))
    assert not verdict["ok"] and "an RCP check would fail" in verdict["verdict"]


def test_runs_that_do_not_converge_count():
    verdict = compare(REFERENCE, outcomes("mode", [1100, 1000, 1200, 1100, None]))
    assert not verdict["ok"] and "1 of 5 runs of the mode did not converge" in verdict["verdict"]
    verdict = compare(REFERENCE, outcomes("mode", [1100, None, None]))
    assert not verdict["ok"] and "too few converged runs" in verdict["verdict"]


def test_the_mode_is_what_the_config_asks_and_the_reference_is_plain():
    from training import benchmarks

    lora = benchmarks.BENCHMARKS["llama2_70b_lora"]
    config = ROOT / "configs" / "llama2_70b_lora" / "config_H200_1x8x1.sh"
    reference, mode = convergence.modes(lora, config, ["LORA_KERNEL=auto"], gpu=True)
    assert (
        reference["PRECISION"] == "bf16" and reference["COMPILE"] == "0" and reference["ATTENTION"] == "sdpa"
    )
    assert mode["PRECISION"] == "fp8" and mode["ACL"] == "14" and mode["LORA_KERNEL"] == "auto"
    assert "MINIBS" not in mode and "LR" not in mode  # sizes and schedule are not the mode's
    with pytest.raises(convergence.CheckError, match="--set LORA_RANKK=4"):
        convergence.modes(lora, None, ["LORA_RANKK=4"], gpu=True)


def test_bad_inputs_are_named_and_nothing_is_overwritten(tmp_path, capsys):
    """The command answers --help; its refusals (main's, called here) name the input and write nothing."""
    argv = [sys.executable, "-m", "training.convergence", "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and "--seeds" in done.stdout

    def run(*args):
        status = convergence.main(list(args))
        return status, capsys.readouterr().err

    status, err = run("llama31_8b", "--datadir", str(tmp_path / "nowhere"))
    assert status == 2 and "--datadir" in err and "no such folder" in err
    status, err = run("gpt3", "--datadir", str(tmp_path))
    assert status == 2 and "BENCHMARK=gpt3 is not one of" in err
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.log").write_text("an earlier check")
    status, err = run("llama31_8b", "--datadir", str(tmp_path), "--out", str(tmp_path / "out"))
    assert status == 2 and "not empty" in err
    assert (tmp_path / "out" / "keep.log").read_text() == "an earlier check"


def test_a_run_that_stops_on_an_error_stops_the_check(tmp_path):
    """A data error is not "did not converge": the check stops on it, naming the run's log and the error,
    with several runs at once too (`--jobs`)."""
    (tmp_path / "data").mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.convergence",
            "llama31_8b",
            "--datadir",
            str(tmp_path / "data"),
            "--seeds",
            "3",
            "--jobs",
            "2",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "_seed1.log: the run stopped with data_error: missing data file" in done.stderr
    assert not (tmp_path / "out" / "convergence.json").exists()
