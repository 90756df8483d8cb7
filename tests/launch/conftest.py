"""Fixtures of the launcher tests: a clean environment for run_with_docker.sh, with the fakes in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.launch.helpers import CONFIG, FAKES, SYSTEM, Launch, fake_launch


@pytest.fixture
def launch(tmp_path: Path) -> Launch:
    """A clean environment for run_with_docker.sh with CONTAINER_RUNTIME=none and the fake PYTHON."""
    return fake_launch(tmp_path, SYSTEM, CONFIG)


@pytest.fixture
def docker_launch(launch: Launch) -> Launch:
    """The same, with CONTAINER_RUNTIME=docker and the fake docker (also linked as podman) first on PATH."""
    for name in ("docker", "podman"):
        (launch.tmp / "bin" / name).symlink_to(FAKES / "docker")
    launch.env.update(CONTAINER_RUNTIME="docker", CONT="mlperf/bert:test")
    return launch
