"""The README's demo path: the shipped small default, unmodified, through run_with_docker.sh without a
container, on data the real pipeline made from the bundled excerpt. Logs that pass MLCommons' compliance
checker, effective configs next to them, and a summary marked not a valid MLPerf result; each run learns (its
last masked-LM accuracy at least 0.12 and 1.5x its first). One run by default; demo.sh's NEXP=2 (a second
run, another seed: the launcher's loop, which tests/launch covers with fakes and tests/containers and
tests/slurm with this config on a short schedule) in the opt-in demo tier (-m demo)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.containers.small_default import prepared_data
from training.scoring.runs import read_run

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "bert" / "config_CPU_1x1x10.sh"


@pytest.mark.slow
@pytest.mark.parametrize("nexp", [1, pytest.param(2, marks=pytest.mark.demo)], ids=lambda n: f"nexp{n}")
def test_small_default_end_to_end(tmp_path, nexp):
    logdir = tmp_path / "results"
    env = {
        **os.environ,
        "CONFIG_FILE": str(CONFIG),
        "DATADIR": str(prepared_data()),
        "LOGDIR": str(logdir),
        "NEXP": str(nexp),
        "CONTAINER_RUNTIME": "none",
        "PYTHON": sys.executable,
    }
    proc = subprocess.run(
        ["bash", "-c", 'source "${CONFIG_FILE}" && exec bash run_with_docker.sh'],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    logs = sorted(logdir.glob("bert_CPU_1x1x10_*.log"))
    assert [p.name for p in logs] == [f"bert_CPU_1x1x10_{i}.log" for i in range(1, nexp + 1)]
    for log in logs:
        assert "SUCCESS" in log.with_suffix(".compliance.txt").read_text()
        effective = json.loads(log.with_suffix(".config.json").read_text())
        assert (
            effective["config"]["TARGET_MLM_ACCURACY"] == 0.12
            and effective["backends"]["attention"] == "sdpa"
        )
        accuracies = [value for _, value in read_run(log).evals]
        assert accuracies[-1] >= 0.12 and accuracies[-1] >= 1.5 * accuracies[0], accuracies
    seeds = [json.loads(p.with_suffix(".config.json").read_text())["seed"] for p in logs]
    assert len(set(seeds)) == nexp

    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["valid_mlperf"] is False and summary["score_minutes"] is None
    assert [r["status"] for r in summary["runs"]] == ["success"] * nexp
    assert all(r["last_eval_accuracy"] >= 0.12 for r in summary["runs"])
    assert "NOT A VALID MLPerf RESULT" in (logdir / "summary.md").read_text()
    assert (logdir / "eval_accuracy.png").stat().st_size > 1000
