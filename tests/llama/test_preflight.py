"""training.llama31_8b.preflight.check: config, arithmetic and data problems, by name."""

from __future__ import annotations

import subprocess
import sys

from tests.llama.helpers import ROOT, no_fp8_backend, subprocess_env
from training.llama31_8b.preflight import check

DEMO = {
    "BENCHMARK": "llama31_8b",
    "CPU_DEMO": "1",
    "GBS": "8",
    "MBS": "4",
    "MAX_LR": "3e-3",
    "WARMUP_STEPS": "16",
    "SEQ_LENGTH": "64",
    "NUM_LAYERS": "2",
    "HIDDEN_SIZE": "64",
    "FFN_HIDDEN_SIZE": "192",
    "NUM_ATTENTION_HEADS": "4",
    "NUM_QUERY_GROUPS": "2",
    "VOCAB_SIZE": "4096",
    "TRAIN_DATA_PREFIX": "wiki-train_text_document",
    "VALID_DATA_PREFIX": "wiki-validation_text_document",
}


def test_demo_data_passes(demo_data, tmp_path):
    assert check({**DEMO, "DATADIR": str(demo_data), "INDEX_CACHE_DIR": str(tmp_path / "idx")}) == []


def test_problems_are_named(demo_data, tmp_path):
    assert check({**DEMO, "DATADIR": str(tmp_path)}) == [
        f"missing data file(s): {tmp_path}/wiki-validation_text_document.bin, "
        f"{tmp_path}/wiki-validation_text_document.idx",
    ]
    long_eval = check({**DEMO, "DATADIR": str(demo_data), "SEQ_LENGTH": "8192"})
    assert (
        len(long_eval) == 1
        and "fewer than the 8388609 that EVAL_SAMPLES=1024 sequences of SEQ_LENGTH=8192" in long_eval[0]
    )
    (arithmetic,) = check({**DEMO, "DATADIR": str(demo_data), "DGXNGPU": "3"})
    assert "GBS=8 is not a multiple of MBS x data-parallel size = 4 x 3" in arithmetic
    (missing,) = check({k: v for k, v in DEMO.items() if k != "GBS"} | {"DATADIR": str(demo_data)})
    assert "GBS: required" in missing


def run_preflight(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "training.preflight"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=subprocess_env(**env),
        timeout=300,
    )


def test_the_preflight_runs_the_benchmarks_check_and_the_tables_data_verifier(demo_data, tmp_path):
    """`python -m training.preflight` for BENCHMARK=llama31_8b: the doctor's report for this benchmark, its
    check, then `python -m input_preprocessing.llama31_8b.verify DATADIR --preflight` on the run's files."""
    env = {**DEMO, "INDEX_CACHE_DIR": str(tmp_path / "idx"), "LOGDIR": str(tmp_path)}
    ok = run_preflight({**env, "DATADIR": str(demo_data)})
    assert ok.returncode == 0, ok.stderr
    assert "llama31_8b: attention (auto)" in ok.stdout and "preflight: llama31_8b OK" in ok.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not the data\n")
    bad = run_preflight({**env, "DATADIR": str(empty)})
    assert bad.returncode == 1
    assert f"missing: {empty}/wiki-train_text_document.bin" in bad.stderr  # the verifier's word
    assert "preflight: llama31_8b FAILED" in bad.stdout
    assert bad.stderr.splitlines()[-1] == (  # what to do, last
        f"preflight: to prepare DATADIR for llama31_8b: BENCHMARK=llama31_8b "
        f"./input_preprocessing/prepare_data.sh --outputdir {empty} --sample"
    )
    unknown = run_preflight({**env, "DATADIR": str(demo_data), "BENCHMARK": "llama2_70b_lora_typo"})
    assert unknown.returncode == 1 and "BENCHMARK=llama2_70b_lora_typo is not one of bert" in unknown.stderr


def test_a_missing_fp8_backend_is_a_preflight_problem(monkeypatch, demo_data, tmp_path):
    from training.fp8 import auto_backend

    no_fp8_backend(monkeypatch)
    env = {**DEMO, "DATADIR": str(demo_data), "INDEX_CACHE_DIR": str(tmp_path / "idx")}
    (problem,) = check({**env, "PRECISION": "fp8"})
    assert "FP8 needs Transformer Engine or torchao; neither is importable" in problem
    assert check({**env, "PRECISION": "bf16"}) == []
    assert auto_backend().startswith("none (")  # what the doctor shows


def test_an_eval_set_too_short_ends_with_the_command(demo_data, tmp_path, monkeypatch, capsys):
    from training import preflight

    env = {**DEMO, "DATADIR": str(demo_data), "INDEX_CACHE_DIR": str(tmp_path / "idx"), "SEQ_LENGTH": "8192"}
    for name, value in {**env, "CONFIG_VARS": " ".join(DEMO)}.items():
        monkeypatch.setenv(name, value)
    assert preflight.main([]) == 1
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("preflight: ")]
    assert len(said) == 2 and "fewer than the 8388609 that EVAL_SAMPLES=1024 sequences" in said[0]
    assert said[1] == (
        f"preflight: to prepare DATADIR for llama31_8b: BENCHMARK=llama31_8b "
        f"./input_preprocessing/prepare_data.sh --outputdir {demo_data} --sample"
    )
