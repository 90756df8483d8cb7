"""The README's demo path: the shipped small default, unmodified, NEXP=2 through run_with_docker.sh without a
container, on data the real pipeline made from the bundled excerpt. Two logs that pass MLCommons' compliance
checker, effective configs next to them, and a summary marked not a valid MLPerf result; each run learns (its
last masked-LM accuracy at least 0.12 and 1.5x its first)."""

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
def test_small_default_end_to_end(tmp_path):
    logdir = tmp_path / "results"
    env = {**os.environ, "CONFIG_FILE": str(CONFIG), "DATADIR": str(prepared_data()), "LOGDIR": str(logdir),
           "NEXP": "2", "CONTAINER_RUNTIME": "none", "PYTHON": sys.executable}  # fmt: skip
    proc = subprocess.run(["bash", "-c", 'source "${CONFIG_FILE}" && exec bash run_with_docker.sh'], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=1800)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    logs = sorted(logdir.glob("bert_CPU_1x1x10_*.log"))
    assert [p.name for p in logs] == ["bert_CPU_1x1x10_1.log", "bert_CPU_1x1x10_2.log"]
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
    assert seeds[0] != seeds[1]

    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["valid_mlperf"] is False and summary["score_minutes"] is None
    assert [r["status"] for r in summary["runs"]] == ["success", "success"]
    assert all(r["last_eval_accuracy"] >= 0.12 for r in summary["runs"])
    assert "NOT A VALID MLPerf RESULT" in (logdir / "summary.md").read_text()
    assert (logdir / "eval_accuracy.png").stat().st_size > 1000
