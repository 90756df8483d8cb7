"""`python -m training.scoring LOGDIR --package OUTDIR` writes the MLCommons submission tree
for the runs and runs mlperf-logging's own package checker on it, whose verdict is the exit status."""

import json
import shutil

import pytest

from tests.scoring.scoring_logs import bert_log_lines, write_log
from training.scoring.__main__ import main

SYSTEM = "TEST_1x8x192"
# Batch 1536 has a BERT RCP of ~2.8M samples: 3M samples to converge passes the RCP check unnormalized.
EVALS = ((1_500_000, 0.5), (3_000_000, 0.73))


def write_runs(logdir, count):
    logdir.mkdir()
    for i in range(1, count + 1):
        tag = f"bert_{SYSTEM}_{i}"
        write_log(logdir / f"{tag}.log", bert_log_lines(minutes=5.0 + i / 10, gbs=1536, evals=EVALS, seed=i))
        effective = {
            "config": {
                "DGXSYSTEM": SYSTEM,
                "DGXNNODES": 1,
                "DGXNGPU": 8,
                "MLPERF_SUBMISSION_ORG": "testorg",
                "MLPERF_SUBMISSION_PLATFORM": "TEST",
            },
            "seed": i,
            "versions": {"python": "3.11.9", "torch": "2.13.0", "hip": "7.0.1", "mlperf_logging": "4.1.68"},
            "accelerator": "AMD Instinct MI300X",
            "git_commit": "0123456789abcdef0123456789abcdef01234567",
        }
        (logdir / f"{tag}.config.json").write_text(json.dumps(effective))
    return logdir


@pytest.fixture(scope="module")
def ten_runs(tmp_path_factory):
    return write_runs(tmp_path_factory.mktemp("package") / "results", 10)


def test_a_good_package_is_written_and_accepted(ten_runs, tmp_path, capsys):
    out = tmp_path / "submission"
    assert main([str(ten_runs), "--out", str(tmp_path / "summary"), "--package", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "PACKAGE CHECKER FOUND NO ERRORS, SUCCESS !" in printed
    root = out / "testorg"
    results = root / "results" / SYSTEM / "bert"
    assert sorted(p.name for p in results.glob("result_*.txt")) == sorted(
        f"result_{i}.txt" for i in range(10)
    )
    assert (results / "result_0.txt").read_text() == (ten_runs / f"bert_{SYSTEM}_1.log").read_text()
    system = json.loads((root / "systems" / f"{SYSTEM}.json").read_text())
    assert (system["submitter"], system["division"], system["status"]) == (
        "testorg",
        "closed",
        "Available on-premise",
    )
    assert (
        system["accelerator_model_name"] == "AMD Instinct MI300X" and system["accelerators_per_node"] == "8"
    )
    assert system["number_of_nodes"] == "1" and system["framework"] == "PyTorch 2.13.0, HIP 7.0.1"
    code = (root / "benchmarks" / "bert" / "implementations" / "pytorch" / "README.md").read_text()
    assert "0123456789abcdef0123456789abcdef01234567" in code
    assert (out / "package_checker.log").read_text().count("PACKAGE CHECKER FOUND NO ERRORS") == 1
    assert "to fill in by hand" in printed and "cooling" in printed  # what the machine cannot tell


def test_a_broken_package_is_rejected_with_the_checker_s_words(ten_runs, tmp_path, capsys):
    logdir = tmp_path / "nine"
    shutil.copytree(ten_runs, logdir)
    for leftover in logdir.glob(f"bert_{SYSTEM}_10.*"):
        leftover.unlink()
    assert main([str(logdir), "--package", str(tmp_path / "submission")]) == 1
    printed = capsys.readouterr()
    assert "Incorrect number of files" in printed.out and "found 9, expected 10" in printed.out
    assert "PACKAGE CHECKER FOUND ERRORS" in printed.out
    assert f"package checker rejects {tmp_path / 'submission'}" in printed.err


def test_a_folder_with_files_is_never_overwritten(ten_runs, tmp_path, capsys):
    out = tmp_path / "submission"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    assert main([str(ten_runs), "--out", str(tmp_path / "summary"), "--package", str(out)]) == 2
    assert f"{out} is not empty: refusing to write a package over what it holds" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and (out / "mine.txt").read_text() == "keep me"
