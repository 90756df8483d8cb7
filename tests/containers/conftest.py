"""Session fixtures of the container tier: podman, the images, the small default's config and data."""

from __future__ import annotations

import os

import pytest

from tests.containers import engine
from tests.containers.small_default import small_default


@pytest.fixture(scope="session")
def podman_env(tmp_path_factory) -> dict[str, str]:
    """The environment that runs podman here (installed with apt where missing), or a skip saying why not."""
    if os.environ.get("MLPERF_SKIP_CONTAINERS"):
        pytest.skip("MLPERF_SKIP_CONTAINERS is set")
    try:
        return engine.ensure_podman(tmp_path_factory.mktemp("podman"))
    except engine.Unavailable as why:
        pytest.skip(f"no container engine can run here: {why}")


@pytest.fixture(scope="session")
def bert_image(podman_env, tmp_path_factory) -> str:
    """Dockerfile.bert of this checkout, built on the local torch base image."""
    base = engine.torch_base(podman_env, tmp_path_factory.mktemp("images"))
    ref, seconds, _ = engine.build_bert(podman_env, base)
    engine.log(f"Dockerfile.bert built in {seconds:.0f} s as {ref}")
    return ref


@pytest.fixture(scope="session")
def small(tmp_path_factory):
    return small_default(tmp_path_factory.mktemp("small_default"))
