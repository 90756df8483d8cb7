"""The suite runs on two pytest-xdist workers (test.sh): tests that start a real podman engine or SLURM
cluster share one worker, in turn, since each takes the machine's container store or cluster ports."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        for marker in ("containers", "slurm"):
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.xdist_group(marker))
