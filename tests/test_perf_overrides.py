"""perf/lib/overrides.py: a bench variant is its benchmark's config plus NAME=VALUE overrides."""

from __future__ import annotations

import argparse

import pytest

from perf.lib import overrides
from training.llama31_8b.config import LlamaPretrainConfig

# what bench_llama sets for the settings a bench does not read
BENCH = {"DATADIR": "/nonexistent", "GBS": "1", "MBS": "1", "MAX_LR": "1e-4", "WARMUP_STEPS": "0"}


def test_parse_reads_words_and_names_a_bad_one():
    assert overrides.parse(["PRECISION=fp8", "FP8_BACKEND=native", "ATTENTION="]) == {
        "PRECISION": "fp8",
        "FP8_BACKEND": "native",
        "ATTENTION": "",
    }
    for bad in ("PRECISION", "=fp8", "precision=fp8", "FP8 BACKEND=x"):
        with pytest.raises(overrides.OverrideError, match=repr(bad)):
            overrides.parse([bad])


def test_variant_label_defaults_to_its_overrides():
    assert overrides.variant("fp8: PRECISION=fp8 FP8_FAST_ACCUM=1") == overrides.Variant(
        "fp8", {"PRECISION": "fp8", "FP8_FAST_ACCUM": "1"}
    )
    assert overrides.variant("PRECISION=fp8  COMPILE=1").label == "PRECISION=fp8 COMPILE=1"
    assert overrides.variant("").label == "base"
    assert [v.label for v in overrides.variants(["a:; b: COMPILE=1;", "c:"])] == ["a", "b", "c"]
    with pytest.raises(overrides.OverrideError, match="given twice"):
        overrides.variants(["PRECISION=fp8", "a: COMPILE=1", "PRECISION=fp8"])
    with pytest.raises(overrides.OverrideError, match="label"):
        overrides.variant("a=b: COMPILE=1")


def test_build_applies_overrides_and_answers_a_typo():
    start = overrides.base("llama31_8b", None, BENCH)
    cfg = overrides.build(LlamaPretrainConfig, start, {"PRECISION": "fp8", "FP8_FAST_ACCUM": "1"})
    assert cfg.run_spec().features.fp8.fast_accum and cfg.run_spec().precision == "fp8"
    assert overrides.build(LlamaPretrainConfig, start, {}).run_spec().features.fp8 is None
    with pytest.raises(overrides.OverrideError, match="did you mean FP8_FAST_ACCUM"):
        overrides.build(LlamaPretrainConfig, start, {"FP8_FAST_ACUM": "1"})
    with pytest.raises(overrides.OverrideError, match="COMPILE"):
        overrides.build(LlamaPretrainConfig, start, {"COMPILE": "maybe"})


def test_a_config_file_is_the_base(tmp_path):
    config = tmp_path / "config.sh"
    config.write_text("export BENCHMARK=llama31_8b PRECISION=fp8 COMPILE=1 GBS=16 DATADIR=/data\n")
    start = overrides.base("llama31_8b", config, BENCH)
    assert (start.environ["GBS"], start.environ["DATADIR"]) == ("1", "/nonexistent")  # the bench's win
    assert overrides.build(LlamaPretrainConfig, start, {"COMPILE": "0"}).compile is False
    assert overrides.build(LlamaPretrainConfig, start, {}).fp8
    config.write_text("export BENCHMARK=llama31_8b COMPLE=1\n")
    with pytest.raises(overrides.OverrideError, match="did you mean COMPILE"):
        overrides.build(LlamaPretrainConfig, overrides.base("llama31_8b", config, BENCH), {})
    with pytest.raises(overrides.OverrideError, match="not bert's"):
        overrides.base("bert", config, BENCH)
    assert overrides.config_class("llama31_8b") is LlamaPretrainConfig


def test_from_args_runs_the_reference_first_with_the_common_overrides_under_each():
    ap = argparse.ArgumentParser()
    overrides.add_arguments(ap, ["bf16:"], "ref: COMPILE=0")
    ap.add_argument("--peer", action="append")
    args = ap.parse_args(
        ["--set", "COMPILE=1 ATTENTION=sdpa", "--variant", "PRECISION=fp8", "--variant", "ref: COMPILE=0"]
    )
    plan = overrides.from_args(args, ["hf: ATTENTION=auto"])
    assert [(v.label, v.overrides) for v in plan.runs] == [
        ("ref", {"COMPILE": "0", "ATTENTION": "sdpa"}),
        ("PRECISION=fp8", {"COMPILE": "1", "ATTENTION": "sdpa", "PRECISION": "fp8"}),
        ("hf", {"COMPILE": "1", "ATTENTION": "auto"}),
    ]
    assert plan.reference.label == "ref" and plan.peers == {"hf"}
    args = ap.parse_args(["--reference", "none"])
    assert overrides.from_args(args).reference is None
    assert [v.label for v in overrides.from_args(args).runs] == ["bf16"]
    with pytest.raises(overrides.OverrideError, match="given twice"):
        overrides.from_args(ap.parse_args(["--variant", "ref: COMPILE=1"]))
