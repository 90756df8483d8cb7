"""The README's flux1 demo path: `prepare_data.sh --sample`, then the shipped small default, unmodified,
through run_with_docker.sh without a container. Logs that pass MLCommons' compliance checker (the demo's
target and evaluation interval substituted, said so), effective configs next to them, a summary marked not
a valid MLPerf result; each run learns (its validation loss at the target 0.7, below 0.6 of its first).
One run by default; the README's NEXP=2 (a second run, another seed: the launcher's loop, which tests/launch
covers with fakes) in the opt-in demo tier (-m demo)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from training.scoring.runs import read_run

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "flux1" / "config_CPU_1x1x16.sh"


@pytest.mark.slow
@pytest.mark.parametrize("nexp", [1, pytest.param(2, marks=pytest.mark.demo)], ids=lambda n: f"nexp{n}")
def test_small_default_end_to_end(tmp_path, nexp):
    data, logdir = tmp_path / "flux_demo", tmp_path / "results"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    prep = subprocess.run(
        ["bash", "input_preprocessing/flux1/prepare_data.sh", "--outputdir", str(data), "--sample"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert prep.returncode == 0, prep.stderr[-3000:]
    env.update(
        {
            "CONFIG_FILE": str(CONFIG),
            "DATADIR": str(data),
            "LOGDIR": str(logdir),
            "NEXP": str(nexp),
            "CONTAINER_RUNTIME": "none",
        }
    )
    proc = subprocess.run(
        ["bash", "-c", 'source "${CONFIG_FILE}" && exec bash run_with_docker.sh'],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    logs = sorted(logdir.glob("flux1_CPU_1x1x16_*.log"))
    assert [p.name for p in logs] == [f"flux1_CPU_1x1x16_{i}.log" for i in range(1, nexp + 1)]
    for log in logs:
        assert "SUCCESS" in log.with_suffix(".compliance.txt").read_text()
        effective = json.loads(log.with_suffix(".config.json").read_text())
        assert effective["config"]["TARGET_ACCURACY"] == 0.7 and effective["config"]["BATCHSIZE"] == 16
        losses = [value for _, value in read_run(log).evals]
        assert losses[-1] <= 0.7 and losses[-1] < 0.6 * losses[0], losses
    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["valid_mlperf"] is False and summary["score_minutes"] is None
    assert [r["status"] for r in summary["runs"]] == ["success"] * nexp
    assert "NOT A VALID MLPerf RESULT" in (logdir / "summary.md").read_text()
