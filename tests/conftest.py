"""Every test. Under pytest-xdist (`./test.sh` runs two workers, a test file each at a time):
- each worker gets a temporary folder of its own as TMPDIR, so that what the code keeps under the system's
  temporary folder by default (the 8B's data index cache) is never shared by two tests running at once;
  torch.compile's cache stays where it was (made for processes sharing it), so that a graph compiled once
  is compiled once;
- each worker and what it starts compute on one thread (OMP_NUM_THREADS=1): the workers already keep the
  cores busy, and two OpenMP threads of these tiny shapes on a core another process wants run many times
  slower than one;
- the files holding a `slow` test are handed out first (test.sh keeps this order: `--no-loadscope-reorder`,
  where xdist would hand out the files with the most tests first), so that the longest ones do not end the
  session with one worker busy and the other idle."""

from __future__ import annotations

import getpass
import os
import shutil
import tempfile
from pathlib import Path


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        default = Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"  # Inductor's own default
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(default))
        config._worker_tmp = tempfile.mkdtemp(prefix=f"pytest-{worker}-")
        os.chmod(config._worker_tmp, 0o1777)  # as /tmp: tests that run a command as another user write here
        os.environ["TMPDIR"] = config._worker_tmp
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)


def pytest_unconfigure(config):
    if getattr(config, "_worker_tmp", None):
        shutil.rmtree(config._worker_tmp, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: each file's tests keep their order
