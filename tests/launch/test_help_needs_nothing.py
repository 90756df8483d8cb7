"""`prepare_data.sh --help` answers before the environment exists: with a python3 that has only the standard
library (no numpy, h5py, tokenizers or torch), the front door and every benchmark's script print their whole
usage and exit 0, as a newcomer's first command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = ("bert", "llama31_8b", "llama2_70b_lora", "flux1")


@pytest.fixture(scope="module")
def bare_bin(tmp_path_factory) -> Path:
    """A folder whose `python3` runs this interpreter without site-packages (`-S`): the standard library."""
    folder = tmp_path_factory.mktemp("bare")
    python = folder / "python3"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    probe = subprocess.run([str(python), "-c", "import numpy"], capture_output=True, text=True)
    assert probe.returncode != 0, "the bare interpreter still imports numpy"
    return folder


def help_of(script: str, bare_bin: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {
        "PATH": f"{bare_bin}{os.pathsep}{os.environ['PATH']}",
        "HOME": os.environ.get("HOME", "/"),
        **env,
    }
    return subprocess.run(
        ["bash", str(REPO / script), "--help"], env=environment, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_the_front_door_s_help_needs_no_library(bare_bin, benchmark):
    result = help_of("input_preprocessing/prepare_data.sh", bare_bin, BENCHMARK=benchmark)
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    assert result.stderr == "", said
    assert "--outputdir" in result.stdout and "usage" in result.stdout.lower(), said


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_each_benchmark_s_help_needs_no_library(bare_bin, benchmark):
    """PYTHON set to the bare interpreter, as a user's own PYTHON would be."""
    result = help_of(
        f"input_preprocessing/{benchmark}/prepare_data.sh", bare_bin, PYTHON=str(bare_bin / "python3")
    )
    said = result.stdout + result.stderr
    assert result.returncode == 0 and result.stderr == "", said
    assert "--outputdir" in result.stdout, said


def test_the_bert_script_still_names_a_missing_library_when_it_would_run(bare_bin, tmp_path):
    script = REPO / "input_preprocessing/bert/prepare_data.sh"
    command = ["bash", str(script), "--outputdir", str(tmp_path / "out")]
    path = {"PATH": f"{bare_bin}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(command, env=path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "lacks h5py or numpy" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
