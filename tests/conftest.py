"""Every test: under pytest-xdist (`./test.sh` runs two workers), each worker gets a temporary folder of its
own as TMPDIR, so that what the code keeps under the system's temporary folder by default (the 8B's data
index cache) is never shared by two tests running at once."""

from __future__ import annotations

import os
import shutil
import tempfile


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        config._worker_tmp = tempfile.mkdtemp(prefix=f"pytest-{worker}-")
        os.environ["TMPDIR"] = config._worker_tmp
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def pytest_unconfigure(config):
    if getattr(config, "_worker_tmp", None):
        shutil.rmtree(config._worker_tmp, ignore_errors=True)
