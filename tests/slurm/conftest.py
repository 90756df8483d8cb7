"""Fixtures of the run.sub tests with fakes: a pretend 2-node SLURM job (fake srun/scontrol, enroot and
apptainer), and the launcher tests' fake PYTHON as the preflight, trainer, compliance checker and scorer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.launch.helpers import FAKES, Launch, fake_launch

SLURM_FAKES = Path(__file__).resolve().parent / "fakes"
SYSTEM = "TEST_2x2x4"
CONFIG = """\
export BENCHMARK=bert
export DGXSYSTEM=$(basename "${BASH_SOURCE[0]}" .sh | sed 's/^config_//')
export DGXNNODES=2 DGXNGPU=2 WALLTIME=30
export BATCHSIZE=4 LR=0.001
export MLPERF_SUBMISSION_ORG=testorg
"""


@pytest.fixture
def job(tmp_path: Path) -> Launch:
    """run.sub's environment inside a 2-node job (as sbatch -N 2 gives it), CONTAINER_RUNTIME=none."""
    (tmp_path / "fakeroot").mkdir()
    job = fake_launch(tmp_path, SYSTEM, CONFIG)
    for name, target in [("srun", "srun"), ("scontrol", "scontrol")]:
        (tmp_path / "bin" / name).symlink_to(SLURM_FAKES / target)
    job.env.update(
        {
            "FAKE_NODES": "node1 node2",
            "FAKE_NODEADDR": "node1-mgmt",
            "SLURM_JOB_ID": "42",
            "SLURM_JOB_NUM_NODES": "2",
            "SLURM_JOB_NODELIST": "node[1-2]",
            "SLURM_CPUS_ON_NODE": "8",
            "SLURM_SUBMIT_DIR": str(tmp_path),
        }
    )
    return job


def add_container_tools(job: Launch, *names: str) -> None:
    """Put fake enroot/apptainer on PATH, and the fake python as the "image's" python3."""
    for name in names:
        (job.tmp / "bin" / name).symlink_to(SLURM_FAKES / "container")
    (job.tmp / "bin" / "python3").symlink_to(FAKES / "python")
