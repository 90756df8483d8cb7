"""The v6.0 4-bit recipes end to end, as a user starts them: the CPU defaults of Llama 2 70B LoRA and
Llama 3.1 8B with the recipe's variables exported on top, NEXP=1 through run_with_docker.sh without a
container, on data from `prepare_data.sh --sample`. LoRA in MXFP4 (AMD's) and in NVFP4 (NVIDIA's), each
healing to FP8 delayed scaling (HEALING_ITER, HEALING_PRECISION=FP8_DS); the 8B in AMD's MXFP4 recipe as its
MI355X config sets it (16-point Hadamard rotation, no healing, the synthetic warm-up in FP8:
WARMUP_RECIPE=fp8_hybrid with AMD's SYNTH_WARMUP_STEPS). Each log discloses the recipe as
`lowest_numerical_precision_in_linear` and passes MLCommons' compliance checker under 6.1.0; the LoRA logs
record the switch to FP8 as a `precision_switch` event at the healing step.

The schedules are cut to what these checks need (the full-length runs are the CPU defaults' own): the switch
after the first optimizer step, one evaluation after it, and a target that evaluation reaches. The LoRA base
model is pretrained for two steps only, so its loss stays near ln(4096) = 8.3 (uniform logits over the
sample tokenizer's vocabulary): TARGET=9 is reached at the first evaluation. The 8B evaluates the 1024
sequences the rules fix, at 16 tokens each, in micro-batches of 32, over a vocabulary of 512 (on a CPU the
bf16 output layer dominates the run's time), so its loss starts near ln(512) = 6.2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cache import REPO, cached, tree_hash

LORA_CONFIG = REPO / "configs" / "llama2_70b_lora" / "config_CPU_1x1x1.sh"
LLAMA_CONFIG = REPO / "configs" / "llama31_8b" / "config_CPU_1x1x1_8b.sh"
LORA_SEQ, LORA_GBS, HEALING_ITER, LLAMA_VOCAB = 64, 2, 1, 512
TARGET = "9"

LORA = {
    "PRECISION": "fp8",
    "FP4": "True",
    "HEALING_ITER": str(HEALING_ITER),
    "HEALING_PRECISION": "FP8_DS",
    "MAX_SEQLEN": str(LORA_SEQ),
    "MINIBS": str(LORA_GBS),
    "MBS": str(LORA_GBS),
    "MAX_STEPS": "4",
    "VAL_CHECK_INTERVAL": str(2 * LORA_GBS),
    "TARGET": TARGET,
}
# AMD's 8B recipe in its own names (tests/data/mlperf_results/v6.0/AMD/.../config_MI355X_1x8x1.sh); the CPU
# default's PRECISION=fp32 would contradict FP4, so the run asks for fp8 around the 4-bit GEMMs, as AMD's does
AMD_8B = {
    "PRECISION": "fp8",
    "FP4": "true",
    "FP4_RECIPE": "mxfp4",
    "NVTE_MXFP4_USE_HADAMARD": "1",
    "WARMUP_RECIPE": "fp8_hybrid",
    "SYNTH_WARMUP_STEPS": "1",
    "GBS": "32",
    "MBS": "32",
    "SEQ_LENGTH": "16",
    "VOCAB_SIZE": str(LLAMA_VOCAB),
    "WARMUP_STEPS": "1",
    "EVAL_EVERY": "32",
    "MAX_SAMPLES_TERMINATION": "64",
    "TARGET": TARGET,
}


def _prepared(name: str, command: list[str], benchmark: str) -> Path:
    """The output of a data preparation `command` (its --outputdir appended), cached by the preparation
    code's hash and `name` (`tests.cache`)."""

    def build(out: Path) -> None:
        env = {**os.environ, "BENCHMARK": benchmark, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
        proc = subprocess.run(
            [*command, "--outputdir", str(out)],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    return cached(f"{name}-{tree_hash(REPO / 'input_preprocessing')}", build)


@pytest.fixture(scope="module")
def lora_data() -> Path:
    prepare = ["bash", "input_preprocessing/prepare_data.sh", "--sample", "--seq-len", str(LORA_SEQ)]
    return _prepared(f"lora_fp4-seq{LORA_SEQ}", [*prepare, "--base-steps", "2"], "llama2_70b_lora")


@pytest.fixture(scope="module")
def llama_data() -> Path:
    # what `prepare_data.sh --sample` runs, with a vocabulary of 512 (VOCAB_SIZE): the output layer's bf16
    # GEMM over the 1024 evaluation sequences is most of the run's time on a CPU
    sample = [sys.executable, "-m", "input_preprocessing.llama31_8b.sample", "--vocab-size", str(LLAMA_VOCAB)]
    return _prepared(f"llama_fp4-vocab{LLAMA_VOCAB}", sample, "llama31_8b")


def _run(config: Path, data: Path, logdir: Path, overrides: dict[str, str]) -> tuple[list[dict], Path]:
    """One run of `config` with `overrides` through run_with_docker.sh; its MLLOG records and log path."""
    env = {
        **os.environ,
        **overrides,
        "CONFIG_FILE": str(config),
        "DATADIR": str(data),
        "LOGDIR": str(logdir),
        "NEXP": "1",
        "CONTAINER_RUNTIME": "none",
        "PYTHON": sys.executable,
    }
    # exported after the config is sourced, as a user adds them on top of the shipped file
    exports = " ".join(f"{k}={v}" for k, v in overrides.items())
    script = f'source "${{CONFIG_FILE}}" && export {exports} && exec bash run_with_docker.sh'
    proc = subprocess.run(
        ["bash", "-c", script], env=env, cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (log,) = sorted(logdir.glob("*_1.log"))
    compliance = log.with_suffix(".compliance.txt").read_text()
    assert "SUCCESS" in compliance and "(training_6.1.0)" in compliance, compliance[-2000:]
    records = [
        json.loads(line.split(":::MLLOG ", 1)[1])
        for line in log.read_text().splitlines()
        if ":::MLLOG " in line
    ]
    return records, log


def _one(records: list[dict], key: str) -> dict:
    (record,) = [r for r in records if r["key"] == key]
    return record


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4"])
def test_lora_fp4_heals_to_fp8(lora_data, tmp_path, recipe):
    records, log = _run(LORA_CONFIG, lora_data, tmp_path, {**LORA, "FP4_RECIPE": recipe})
    assert _one(records, "run_stop")["metadata"]["status"] == "success"
    assert _one(records, "lowest_numerical_precision_in_linear")["value"] == recipe
    # the first HEALING_ITER optimizer steps in 4 bits; the event names the first step in FP8 (from 1) and
    # counts the samples trained before it
    switch = _one(records, "precision_switch")
    assert switch["value"] == {"from": recipe, "to": "fp8", "step": HEALING_ITER + 1}
    assert switch["metadata"]["samples_count"] == HEALING_ITER * LORA_GBS
    evals = [r for r in records if r["key"] == "eval_accuracy"]
    assert evals and records.index(switch) < records.index(evals[0])
    effective = json.loads(log.with_suffix(".config.json").read_text())
    assert effective["config"]["FP4_RECIPE"] == recipe and effective["config"]["HEALING_ITER"] == HEALING_ITER
    assert effective["backends"]["fp8"].startswith(recipe.upper())
    assert "GEMMs emulated" in effective["backends"]["fp8"]


@pytest.mark.slow
def test_llama31_8b_amds_mxfp4_recipe(llama_data, tmp_path):
    records, log = _run(LLAMA_CONFIG, llama_data, tmp_path, AMD_8B)
    assert _one(records, "run_stop")["metadata"]["status"] == "success"
    assert _one(records, "lowest_numerical_precision_in_linear")["value"] == "mxfp4"
    assert [r for r in records if r["key"] == "eval_accuracy"]
    assert not [r for r in records if r["key"] == "precision_switch"]  # AMD's 8B: 4 bits throughout
    backend = _one(records, "backend_fp8")["value"]
    assert backend.startswith("MXFP4") and "16-point Hadamard rotation" in backend
    assert "no healing" in backend and "synthetic warm-up in FP8" in backend
    effective = json.loads(log.with_suffix(".config.json").read_text())
    assert effective["config"]["SYNTHETIC_WARMUP_STEPS"] == 1  # AMD's SYNTH_WARMUP_STEPS, honored
    assert effective["config"]["WARMUP_RECIPE"] == "fp8_hybrid"
