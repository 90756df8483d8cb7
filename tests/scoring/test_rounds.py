"""The ruleset guessed from the run dates (rounds.py), the division (division.py), the RCP tables by date
(rcp_tables.py) and a scaling.json beside the logs."""

import datetime
import json
import shutil

import pytest

from tests.scoring.scoring_logs import RESULTS, bert_log_lines, copy_official, write_log
from training.scoring.__main__ import main
from training.scoring.division import choose_division
from training.scoring.rcp_tables import HISTORY, PACKAGE_TABLES, choose_table, git_blob_id, versions
from training.scoring.rounds import ROUNDS, choose_ruleset
from training.scoring.runs import find_logs, read_run
from training.scoring.score import score_logdir


def ms(day: str) -> float:
    return datetime.datetime.fromisoformat(day + "T12:00:00+00:00").timestamp() * 1000


@pytest.mark.parametrize(
    "benchmark, days, ruleset, guessed, said",
    [
        ("bert", ["2024-07-01", "2024-05-02"], "4.1.0", True, "last run is of 2024-07-01"),
        ("bert", ["2024-06-11"], "4.0.0", True, "round 4.0 (published 2024-06-11)"),
        ("bert", ["2021-05-01"], "3.0.0", True, "bert was in rounds 1.0 to 2.1 too"),
        ("bert", ["2025-06-01"], "5.0.0", False, "new runs (the last on 2025-06-01, after bert's last round"),
        ("llama2_70b_lora", ["2025-05-01"], "5.0.0", True, "first round of llama2_70b_lora after it;"),
        ("llama31_8b", ["2025-05-01"], "5.1.0", True, "round 5.1 (published 2025-11-05)"),
        ("llama31_8b", ["2026-01-01"], "6.0.0", True, "round 6.0 (published 2026-06-16)"),
        ("llama2_70b_lora", ["2026-05-15"], "6.0.0", True, "first round of llama2_70b_lora after it;"),
        ("llama31_8b", ["2026-11-01"], "6.1.0", False, "llama31_8b's ruleset for new runs"),
        ("llama31_8b", [], "6.1.0", True, "no run_start in the logs to date them"),
    ],
)
def test_ruleset_from_the_run_dates(benchmark, days, ruleset, guessed, said):
    default = {"bert": "5.0.0"}.get(benchmark, "6.1.0")
    chosen = choose_ruleset(benchmark, default, None, [ms(day) for day in days])
    assert (chosen.ruleset, chosen.guessed) == (ruleset, guessed) and said in chosen.why, chosen.why
    assert choose_ruleset(benchmark, default, "4.1.0", [ms(d) for d in days]).ruleset == "4.1.0"


def order(ruleset: str) -> tuple[int, ...]:
    return tuple(map(int, ruleset.split(".")))


def test_no_public_set_here_is_dated_after_its_round():
    """The rule the guess rests on, on the sets we keep: each is guessed its round or an earlier one."""
    sets = sorted({log.parent for log in RESULTS.glob("v*/**/result_*.txt")})
    assert len(sets) == 10  # v6.0: two result sets and the headers of two of AMD's logs
    published = {r.ruleset[:3]: r for r in ROUNDS}
    for folder in sets:
        round_ = folder.relative_to(RESULTS).parts[0].removeprefix("v")
        runs = [read_run(log) for log in find_logs(folder)]
        guess = choose_ruleset(runs[0].benchmark, "x", None, [r.run_start_ms for r in runs])
        assert guess.guessed and order(guess.ruleset) <= order(published[round_].ruleset), (folder, guess)


def test_the_ruleset_our_trainer_recorded_wins_over_the_dates():
    recorded = choose_ruleset("llama31_8b", "6.1.0", None, [ms("2025-05-01")], ["5.1.0"])
    assert (recorded.ruleset, recorded.guessed) == ("5.1.0", False) and "recorded" in recorded.why
    assert choose_ruleset("llama31_8b", "6.1.0", "6.0.0", [], ["5.1.0"]).ruleset == "6.0.0"  # --ruleset wins
    with pytest.raises(ValueError, match=r"different rulesets \(5.1.0, 6.1.0\)"):
        choose_ruleset("llama31_8b", "6.1.0", None, [], ["6.1.0", "5.1.0"])


def test_a_wrong_ruleset_is_one_clear_error(tmp_path, capsys):
    write_log(tmp_path / "result_0.txt", bert_log_lines())
    assert main([str(tmp_path), "--ruleset", "5.1"]) == 2
    assert capsys.readouterr().err == "error: --ruleset 5.1: mlperf_logging has no training ruleset '5.1'\n"


def mlcommons_tree(tmp_path, division):
    """One run in <submitter>/results/<system>/bert, with <submitter>/systems/<system>.json beside it."""
    logdir = tmp_path / "Org" / "results" / "sys1" / "bert"
    logdir.mkdir(parents=True)
    write_log(logdir / "result_0.txt", bert_log_lines())
    (tmp_path / "Org" / "systems").mkdir()
    desc = tmp_path / "Org" / "systems" / "sys1.json"
    desc.write_text(division if division[0] in "{[" else json.dumps({"division": division}))
    return logdir, desc


def test_division_sources_in_order(tmp_path):
    logdir, desc = mlcommons_tree(tmp_path, "open")
    assert choose_division(logdir, "closed", ["closed"]).division == "closed"  # --division first
    chosen = choose_division(logdir, None, ["closed"])
    assert chosen.division == "open" and str(desc) in chosen.why and "says closed" in chosen.why
    desc.unlink()
    assert choose_division(logdir, None, ["open", "open"]).division == "open"  # the logs, when no file
    chosen = choose_division(logdir, None, ["open", "closed"])
    assert chosen.division == "closed" and "says closed, open" in chosen.why
    assert choose_division(tmp_path, None, []).why.startswith("closed by default")


@pytest.mark.parametrize(
    "text, error",
    [
        ("{not json", "the system description is not JSON"),
        ('{"division": "Open"}', "the system description's division is 'Open', not closed or open"),
        ("[]", "the system description's division is None"),
    ],
)
def test_a_bad_system_description_is_one_clear_error(tmp_path, capsys, text, error):
    logdir, desc = mlcommons_tree(tmp_path, text)
    assert main([str(logdir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {desc}: {error}") and err.count("\n") == 1
    assert not (logdir / "summary.md").exists()


def test_recorded_tables_are_the_upstream_files():
    """Each kept version has the git blob id index.json names; the last version of each table is the file
    the pinned mlperf-logging ships, so the default table is the last one on master."""
    index = json.loads((HISTORY / "index.json").read_text())
    assert {path.name for path in HISTORY.glob("rcps_*.json")} == {v["file"] for v in index if v["file"]}
    assert len(versions("5.1.0", "llama31_8b")) == 4 and len(versions("3.1.0", "bert")) == 1
    for v in index:
        final = v == versions(v["ruleset"], v["benchmark"])[-1]
        rel = f"training_{v['ruleset']}/rcps_{v['benchmark']}.json"
        path = PACKAGE_TABLES / rel if final else HISTORY / v["file"]
        assert (v["file"] is None) == final and git_blob_id(path.read_bytes()) == v["blob"], v


@pytest.mark.parametrize(
    "day, kept",
    [
        ("2025-08-11", "rcps_llama31_8b_5.1.0_2025-08-11.json"),
        ("2025-10-08", "rcps_llama31_8b_5.1.0_2025-10-08.json"),
        ("2025-10-15", "rcps_llama31_8b_5.1.0_2025-10-09.json"),
        ("2025-10-16", None),
        ("2026-01-01", None),
    ],
)
def test_table_as_on_a_day(day, kept):
    table = choose_table("5.1.0", "llama31_8b", day)
    assert (table.path.name if table.path else None) == kept
    assert f"as on mlcommons/logging master on {day}" in table.name
    assert ("kept in training/scoring/rcp_history/" in table.name) == bool(kept)


@pytest.mark.parametrize(
    "spec, error",
    [
        (
            "2025-08-10",
            "--rcp-table 2025-08-10: training_5.1.0/rcps_llama31_8b.json was not yet on "
            "mlcommons/logging master on 2025-08-10 (its first version came on 2025-08-11)",
        ),
        ("2025-13-01", "--rcp-table 2025-13-01: not a date (YYYY-MM-DD)"),
        ("missing.json", "--rcp-table missing.json: cannot read it (No such file or directory)"),
        ("bert", "--rcp-table bert: RCPs of bert, not of llama31_8b"),
        ("notjson", "--rcp-table notjson: not JSON"),
    ],
)
def test_a_bad_rcp_table_is_one_clear_error(tmp_path, monkeypatch, capsys, spec, error):
    logdir = copy_official("v5.1/AMD/MI355X_EPYC_9575F_pytorch/llama31_8b", tmp_path)
    monkeypatch.chdir(tmp_path)
    shutil.copy(PACKAGE_TABLES / "training_5.0.0" / "rcps_bert.json", tmp_path / "bert")
    (tmp_path / "notjson").write_text("{")
    assert main([str(logdir), "--ruleset", "5.1.0", "--rcp-table", spec]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {error}") and err.count("\n") == 1
    assert not (logdir / "summary.md").exists()


def test_rcp_table_from_a_file():
    path = HISTORY / "rcps_llama31_8b_5.1.0_2025-10-09.json"
    table = choose_table("5.1.0", "llama31_8b", str(path))
    assert (table.path, table.name) == (path, f"{path} (given with --rcp-table)")


def test_rcp_table_none_for_a_ruleset_without_the_benchmark():
    assert choose_table("4.1.0", "llama31_8b").name == (
        "none: mlperf-logging 4.1.68 has no training_4.1.0/rcps_llama31_8b.json"
    )
    with pytest.raises(ValueError, match="no recorded history of training_4.1.0/rcps_llama31_8b.json"):
        choose_table("4.1.0", "llama31_8b", "2025-01-01")


def test_scaling_json_beside_the_logs_is_applied_and_told(tmp_path):
    """As the summarizer does; the RCP check's own factor (1.0 for this BERT set) gives the other score."""
    logdir = copy_official("v4.1/NVIDIA/eos_ngc23.04_pytorch/bert", tmp_path)
    (logdir / "scaling.json").write_text('{"scaling_factor": 1.01}')
    s = score_logdir(logdir, "4.1.0")
    assert (s["rcp"]["normalization_factor"], s["normalization_factor"]) == (1.0, 1.01)
    assert s["score_minutes"] == pytest.approx(5.46880625 * 1.01, rel=1e-12)
    assert s["score_minutes_with_rcp_factor"] == pytest.approx(5.46880625, rel=1e-12)
    assert any(n.startswith("scaling.json beside the logs says 1.01, the RCP check with") for n in s["notes"])
    (logdir / "scaling.json").write_text('{"scaling_factor": "high"}')
    with pytest.raises(ValueError, match="scaling.json: scaling_factor 'high' is not a positive number"):
        score_logdir(logdir, "4.1.0")


def test_new_runs_of_our_own_are_not_guessed(tmp_path):
    write_log(tmp_path / "result_0.txt", bert_log_lines())
    s = score_logdir(tmp_path)
    assert (s["ruleset"], s["ruleset_guessed"], s["division"]) == ("5.0.0", False, "closed")
    assert s["ruleset_source"].startswith("new runs (the last on 2026-11-01, after bert's last round here")
    assert s["division_source"].startswith("from the logs' submission_division")
