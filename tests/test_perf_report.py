"""perf/report.py: the measured tables of perf/RESULTS.md and README.md are what the benches' JSON in
perf/results/ gives (a hand edit fails here), and a row is a claim only with a same-call peer and a passing
loss-parity verdict."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from perf import report
from perf.report import Pick

ROOT = Path(__file__).resolve().parents[1]


def test_the_tables_are_what_the_json_gives():
    """Fails after a hand edit of a table, or a JSON change without `python -m perf.report`."""
    assert report.update(write=False) == []


def test_a_hand_edited_figure_is_named(tmp_path):
    for name in ("README.md", "perf/RESULTS.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "perf" / "results").symlink_to(ROOT / "perf" / "results")
    readme = tmp_path / "README.md"
    text = readme.read_text()
    assert "| **3.14x** |" in text
    readme.write_text(text.replace("| **3.14x** |", "| **3.41x** |", 1))
    assert report.update(tmp_path, write=False) == ["README.md: table 'performance'"]
    assert report.update(tmp_path) == ["README.md: table 'performance'"]  # rewritten
    assert readme.read_text() == text and report.update(tmp_path, write=False) == []


def test_missing_markers_are_an_error_naming_the_file():
    with pytest.raises(ValueError, match=r"README.md: expected one pair of markers for the table 'x'"):
        report.splice("no markers here\n", "x", "| table |", "README.md")


def test_every_headline_row_reads_its_json():
    rows = report.headline_rows()
    assert len(rows) == len(report.HEADLINE)
    assert all(r.ours and r.unit and r.machine.split(" x ")[0].isdigit() for r in rows)
    assert any(r.pick.readme and not r.problem for r in rows)


PICK = Pick("a mode", "x.json", "ours-fp8", "peer-bf16", "the peer")


def call(ours: dict | None = None, peer: dict | None = None, **top) -> dict:
    """A bench's JSON: two runs of one call on 4 GPUs, the variant compared with the peer and passing."""
    variant = {
        "tokens_per_s_per_gpu": 1500.0,
        "parity": {
            "reference": "peer-bf16",
            "tolerance": 0.05,
            "ok": True,
            "max_rel_dev": 0.004,
            "verdict": "ok (0.40% max over 6 steps)",
        },
    }
    reference = {
        "tokens_per_s_per_gpu": 1000.0,
        "parity": {"ok": True, "verdict": "reference (not degenerate)"},
    }
    runs = {"ours-fp8": {**variant, **(ours or {})}, "peer-bf16": {**reference, **(peer or {})}}
    return {"device": "NVIDIA H200", "world_size": 4, "runs": runs, **top}


def test_a_same_call_peer_and_a_passing_verdict_make_a_claim():
    row = report.evaluate(PICK, call())
    assert (row.problem, row.ratio, row.machine, row.unit) == ("", "1.50x", "4 x H200", "tokens/s/GPU")
    assert row.parity == "ok (0.40% max over 6 steps), against `peer-bf16`"


def test_a_reference_is_named_by_its_settings():
    """A row recorded with its overrides names its reference's settings; an earlier row's reference name is
    read as the settings it ran with."""
    peer = {"model": "peft", "overrides": {"ACTIVATION_CHECKPOINTING": "1"}}
    row = report.evaluate(PICK, call(peer=peer))
    assert row.parity.endswith("against HF + `peft`, `ACTIVATION_CHECKPOINTING=1`")
    assert report.evaluate(PICK, call(peer={"model": "ours", "overrides": {}})).parity.endswith(
        "against ours, the config's defaults"
    )
    earlier = call(ours={"parity": {**call()["runs"]["ours-fp8"]["parity"], "reference": "peft-bf16-ac"}})
    assert report.evaluate(PICK, earlier).parity.endswith("against HF + `peft`, `ACTIVATION_CHECKPOINTING=1`")


@pytest.mark.parametrize(
    "data, problem",
    [
        (
            call(ours={"parity": {"ok": False, "verdict": "off by 13.6% at step 6 (> 5%)"}}),
            "loss parity: off by 13.6% at step 6 (> 5%)",
        ),
        (
            call(
                ours={
                    "parity": {
                        "ok": True,
                        "verdict": "no reference losses (peer-bf16 did not run): not degenerate only",
                    }
                }
            ),
            "loss parity: no reference losses (peer-bf16 did not run): not degenerate only",
        ),
        (call(ours={"parity": None}), "no loss-parity verdict"),
        (
            call(peer={"tokens_per_s_per_gpu": None, "error": "out of memory"}),
            "no peer in the same call (`peer-bf16` did not run)",
        ),
        (
            call(peer={"parity": {"ok": False, "verdict": "off by 2.8% at step 6 (> 2%)"}}),
            "the peer's own loss parity: off by 2.8% at step 6 (> 2%)",
        ),
    ],
)
def test_every_other_row_is_listed_apart_with_its_reason(data, problem):
    for run in data["runs"].values():  # (None stands for a key the bench did not write)
        for key in [k for k, v in run.items() if v is None]:
            del run[key]
    row = report.evaluate(PICK, data)
    assert row.problem == problem
    assert f"**{problem}**" in report.render_headline([row]).split("Measured, not claims")[1]
    assert "peer-bf16" not in report.render_readme([row])


def test_a_peer_in_another_call_is_no_peer():
    data = call()
    del data["runs"]["peer-bf16"]
    assert report.evaluate(PICK, data).problem == "no peer in the same call"
    with pytest.raises(ValueError, match="x.json: no run 'other'"):
        report.evaluate(Pick("a mode", "x.json", "other", "peer-bf16", "the peer"), data)
