"""Two public result sets that a scorer easily scores otherwise than MLCommons published them.

- Intel's open-division BERT of round 3.1 (16 nodes): the summarizer reads the division from the system
  description (the logs say closed), runs no RCP check for open results and publishes the olympic mean.
- Supermicro's Llama 3.1 8B of round 5.1 at global batch 16: the published score applies the scaling.json
  the submitter shipped (1.003831417624521, what the RCP checker gives with the training_5.1.0 table of
  2025-10-09, before the batch-16 RCPs); the round's final table, today's, gives 1.0.
Values as tests/data/mlperf_results/README.md gives them (mlperf-logging 4.1.68's result summarizer).
"""

import json

import pytest

from tests.scoring.scoring_logs import RESULTS
from training.scoring.__main__ import main
from training.scoring.checkers import rcp_check
from training.scoring.rcp_tables import choose_table
from training.scoring.runs import find_logs
from training.scoring.score import score_logdir

INTEL = RESULTS / "v3.1/Intel/results/16-nodes-SPR-pytorch-open/bert"
SUPERMICRO = RESULTS / "v5.1/Supermicro/results/AS-4126GS-NBR-LCC/llama31_8b"
INTEL_MEAN = 31.0600125  # the summarizer's CSV: 31.060012500000003
SUPERMICRO_MEAN = 86.40642291666666  # the summarizer's second pass, scaling.json reset by today's table
SUPERMICRO_SHIPPED = 1.003831417624521  # its scaling.json
SUPERMICRO_PUBLISHED = 86.7374820083014  # the summarizer's CSV, first pass


@pytest.fixture(scope="module")
def intel():
    return score_logdir(INTEL, "3.1.0")


def test_open_division_is_read_from_the_system_description(intel):
    assert intel["division"] == "open"
    assert "systems/16-nodes-SPR-pytorch-open.json" in intel["division_source"]
    assert "submission_division says closed" in intel["division_source"]
    assert (intel["ruleset"], intel["ruleset_guessed"]) == ("3.1.0", False)
    assert intel["rcp"]["passed"] is None and "open division" in intel["rcp"]["message"]
    assert intel["ok"] and all(run["compliant"] for run in intel["runs"])
    assert intel["mean_minutes"] == pytest.approx(INTEL_MEAN, rel=1e-12)
    assert intel["score_minutes"] == pytest.approx(INTEL_MEAN, rel=1e-12)
    assert intel["normalization_factor"] == 1.0 and intel["scaling_json"] is None


def test_closed_rules_give_the_open_set_no_score(tmp_path, capsys):
    """--division closed: what the scorer did before, the RCP check fails (3072 samples a batch converge far
    faster than BERT's RCPs allow), no score."""
    assert main([str(INTEL), "--ruleset", "3.1.0", "--division", "closed", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "- division closed: given (--division)" in out
    assert "- RCP check: FAILED (RCP Interpolation)" in out and "**score: - min**" in out


def test_published_8b_score_applies_the_shipped_scaling(tmp_path, capsys):
    """No flags: the ruleset guessed from the run dates, the package's table named, scaling.json applied."""
    assert main([str(SUPERMICRO), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    s = json.loads((tmp_path / "summary.json").read_text())
    assert (s["division"], s["ruleset"], s["ruleset_guessed"]) == ("closed", "5.1.0", True)
    assert "last run is of 2025-10-09" in s["ruleset_source"] and "round 5.1" in s["ruleset_source"]
    assert "- ruleset 5.1.0 (**guessed**)" in out
    assert s["rcp_table"].startswith("mlperf-logging 4.1.68's training_5.1.0/rcps_llama31_8b.json (its last")
    assert "mlcommons/logging@3580a1e, on master since 2025-10-16" in s["rcp_table"]
    assert s["mean_minutes"] == pytest.approx(SUPERMICRO_MEAN, rel=1e-12)
    assert s["rcp"]["passed"] and s["rcp"]["normalization_factor"] == 1.0  # today's table has batch-16 RCPs
    assert s["scaling_json"] == SUPERMICRO_SHIPPED == s["normalization_factor"]
    assert s["score_minutes"] == pytest.approx(SUPERMICRO_PUBLISHED, rel=1e-12)
    assert s["score_minutes_with_rcp_factor"] == pytest.approx(SUPERMICRO_MEAN, rel=1e-12)
    assert "**score: 86.737482 min**" in out and "With the RCP check's factor: 86.406423 min." in out


def test_the_shipped_factor_is_the_rcp_check_with_the_table_of_its_day():
    """The table on master on 2025-10-09 had no batch-16 RCP: the checker compared the runs with the
    smallest batch it had, 32 (RCP mean 178858.67 samples against the runs' 178176)."""
    table = choose_table("5.1.0", "llama31_8b", "2025-10-09")
    rcp = rcp_check(find_logs(SUPERMICRO), "5.1.0", table=table.path)
    message = "RCP not found but slower convergence on smaller batch size"
    assert (rcp.passed, rcp.message, rcp.normalization_factor) == (True, message, SUPERMICRO_SHIPPED)
    assert any("178858.66666666666 / 178176.0 = 1.003831417624521" in line for line in rcp.log), rcp.log
