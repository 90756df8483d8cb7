"""Fixtures of the launcher tests: a clean environment for run_with_docker.sh, with the fakes in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.launch.helpers import CONFIG, FAKES, SYSTEM, Launch


@pytest.fixture
def launch(tmp_path: Path) -> Launch:
    """A clean environment for run_with_docker.sh with CONTAINER_RUNTIME=none and the fake PYTHON."""
    (tmp_path / "data").mkdir()
    (tmp_path / "state").mkdir()
    config = tmp_path / f"config_{SYSTEM}.sh"
    config.write_text(CONFIG)
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "CONFIG_FILE": str(config),
        "DATADIR": str(tmp_path / "data"),
        "LOGDIR": str(tmp_path / "results"),
        "CONTAINER_RUNTIME": "none",
        "PYTHON": str(FAKES / "python"),
        "TUNABLES_ROOT": str(tmp_path / "fakeroot"),
        "DROPCACHE_CMD": "true",
        "FAKE_CALLS": str(tmp_path / "calls.tsv"),
        "FAKE_STATE": str(tmp_path / "state"),
    }
    (tmp_path / "bin").mkdir()
    return Launch(tmp_path, env)


@pytest.fixture
def docker_launch(launch: Launch) -> Launch:
    """The same, with CONTAINER_RUNTIME=docker and the fake docker (also linked as podman) first on PATH."""
    for name in ("docker", "podman"):
        (launch.tmp / "bin" / name).symlink_to(FAKES / "docker")
    launch.env.update(CONTAINER_RUNTIME="docker", CONT="mlperf/bert:test")
    return launch
