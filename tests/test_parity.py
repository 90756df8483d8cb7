"""perf/parity.py: the loss-parity verdict every bench prints beside its speed figures (issue 34)."""

from __future__ import annotations

import math

from perf import parity

REFERENCE = [12.008, 11.910, 11.751, 11.50, 11.20, 10.90, 10.60, 10.30]
V = 32000


def test_a_variant_on_the_reference_curve_passes():
    close = [x * (1 + 0.004 * (-1) ** i) for i, x in enumerate(REFERENCE)]
    record = parity.verdict(close, REFERENCE, parity.uniform_loss(V), "bf16")
    assert record["ok"] and record["verdict"].startswith("ok (0.40% max")


def test_uniform_logits_are_named_degenerate():
    """The FP8_WEIGHTS model of 12fdffa: 10.374073 at every step, ln(32000) = 10.373491."""
    flat = [10.374073] * 8
    record = parity.verdict(flat, REFERENCE, parity.uniform_loss(V), "fp8")
    assert not record["ok"] and "degenerate" in record["verdict"]
    assert parity.ratio_cell(2.47, record) == "invalid"
    assert "**FAIL**" in parity.column(record)
    # with no reference at all the check still applies
    assert not parity.verdict(flat, None, math.log(V))["ok"]


def test_a_variant_off_the_curve_or_not_learning_fails():
    off = [x * 1.03 for x in REFERENCE]
    assert "off by 3.0% at step" in parity.verdict(off, REFERENCE, math.log(V), "bf16")["verdict"]
    assert parity.verdict(off, REFERENCE, math.log(V), "fp8")["ok"]  # within FP8's 5%
    stuck = [12.008, 11.999, 11.99, 11.98, 11.97, 11.96, 11.95, 11.94]  # scale-1 FP8's flat first steps, kept
    long_ref = [12.008, 11.95, 11.85, 11.7, 11.6, 11.5, 11.45, 11.4]  # fell 0.6 (> 2 x 5%), stuck 0.07
    record = parity.verdict(stuck, long_ref, math.log(V), "fp8")
    assert not record["ok"] and "does not learn" in record["verdict"]
    assert "non-finite" in parity.verdict([12.0, math.nan], REFERENCE, math.log(V))["verdict"]


def test_check_all_marks_the_reference_and_skips_other_batches():
    runs = {"ref": {"losses": REFERENCE}, "fast": {"losses": REFERENCE}, "hf": {"losses": [1.0] * 8}}
    parity.check_all(runs, "ref", math.log(V), skip={"hf": "other batches"})
    assert runs["ref"]["parity"]["verdict"] == "reference (not degenerate)"
    assert runs["fast"]["parity"]["ok"] and runs["hf"]["parity"]["verdict"] == "not compared: other batches"
    lonely = {"fast": {"losses": REFERENCE}}
    parity.check_all(lonely, "ref", math.log(V))
    assert "did not run" in lonely["fast"]["parity"]["verdict"]
