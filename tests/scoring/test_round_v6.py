"""MLPerf Training v6.0's published LoRA result sets, scored with the round inferred (not passed): the
scores of the submitters' summary.json (mlperf-logging's result summarizer), GigaComputing's lines prefixed
with a rank (`0: :::MLLOG`) as NeMo writes them. Their logs keep every line but tracked_stats
(tests/data/mlperf_results/v6.0/README.md)."""

import json

import pytest

from tests.scoring.scoring_logs import RESULTS
from training.scoring.compliance import check_compliance
from training.scoring.score import score_logdir

V6 = RESULTS / "v6.0"
SETS = [
    ("Inventec", "P9000IG7_ngc26.04_nemo"),
    ("GigaComputing", "G894-SD3-AAX7_pytorch"),
]


@pytest.mark.parametrize("submitter, system", SETS)
def test_published_lora_score(submitter, system):
    rows = json.loads((V6 / submitter / "summary.json").read_text())
    (published,) = [row for row in rows if row["details_url"].endswith(f"/systems/{system}.json")]
    s = score_logdir(V6 / submitter / "results" / system / "llama2_70b_lora")
    assert (s["ruleset"], s["ruleset_guessed"]) == ("6.0.0", True) and "round 6.0" in s["ruleset_source"]
    assert all(run["compliant"] for run in s["runs"]), [r["verdict"] for r in s["runs"]]
    assert s["rcp"]["passed"]
    assert s["normalization_factor"] == pytest.approx(
        published["llama2_70b_lora:rcp_scaling_factor"], rel=1e-9
    )
    # the summarizer's JSON rounds to 10 decimals
    assert s["score_minutes"] == pytest.approx(published["llama2_70b_lora:time_to_train"], abs=1e-10)


def test_a_61_check_names_amds_misnamed_key(tmp_path):
    """AMD's v6.0 logs name the linear layers' precision `lowest_numerical_precision_linear`; 6.1 wants
    `lowest_numerical_precision_in_linear`, and the check says so by the key."""
    header = V6 / "AMD/results/MI355X_EPYC_9575F_primus/llama2_70b_lora/result_0.header.txt"
    log = tmp_path / "result_0.txt"
    log.write_bytes(header.read_bytes())
    ok, messages = check_compliance(log, "6.1.0", write_report=False)
    assert not ok
    assert (
        "ERROR: the log has 'lowest_numerical_precision_linear' where training_6.1.0 requires "
        "'lowest_numerical_precision_in_linear' (a misnamed key)"
    ) in messages


def test_crlf_result_files_score_the_same(tmp_path):
    """AMD's result files end their lines with CRLF; they read as MLCommons' summarizer reads them."""
    folder = V6 / "Inventec/results/P9000IG7_ngc26.04_nemo/llama2_70b_lora"
    for log in folder.glob("result_*.txt"):
        (tmp_path / log.name).write_bytes(log.read_bytes().replace(b"\n", b"\r\n"))
    crlf, lf = score_logdir(tmp_path), score_logdir(folder)
    assert all(run["compliant"] for run in crlf["runs"])
    assert crlf["score_minutes"] == lf["score_minutes"] and crlf["ruleset"] == "6.0.0"
