"""run.sub on a real SLURM cluster started here (two slurmd on this machine): `sbatch -N 2 run.sub` for the
small default derived to 2 nodes x 1 process, CONTAINER_RUNTIME=none, gloo over loopback, NEXP=2. About a
minute on synthetic data; more with the shipped CPU config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.containers.small_default import REPO, small_default
from tests.slurm.cluster import Cluster, Unavailable, ensure_packages, free_ports

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
JOB_TIMEOUT = 270  # seconds: the test's bound on the whole job


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.environ.get("MLPERF_SKIP_SLURM"):
        pytest.skip("MLPERF_SKIP_SLURM is set")
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("the SLURM test starts slurmctld, slurmd and munged as root: not root here")
    try:
        ensure_packages()
    except Unavailable as why:
        pytest.skip(f"SLURM cannot be installed here: {why}")
    cluster = Cluster(tmp_path_factory.mktemp("slurm"), nodes=2)
    try:
        cluster.start()
    except (Unavailable, subprocess.SubprocessError) as why:
        cluster.stop()
        pytest.skip(f"SLURM cannot run here: {why}")
    yield cluster
    cluster.stop()


def test_sbatch_two_nodes(cluster, tmp_path):
    small = small_default(tmp_path / "small")
    # one thread a rank: two "nodes" share this machine's cores, and two spinning OpenMP threads per rank
    # there wait on each other at every gloo all-reduce (the other CPU configs set it for the same reason)
    config = small.derive(tmp_path, nodes=2, gpus=1, OMP_NUM_THREADS="1")
    logdir = tmp_path / "results"
    (tmp_path / "fakeroot").mkdir()
    env = {k: v for k, v in cluster.env.items() if k not in ("DGXSYSTEM", "BENCHMARK", "CONT")}
    env.update(
        CONFIG_FILE=str(config),
        DATADIR=str(small.datadir),
        LOGDIR=str(logdir),
        NEXP="2",
        CONTAINER_RUNTIME="none",
        PYTHON=sys.executable,
        MASTER_PORT=str(free_ports(1)[0]),
        TUNABLES_ROOT=str(tmp_path / "fakeroot"),  # host tuning: a fake tree, this machine untouched
    )
    out = tmp_path / "slurm-%j.out"
    start = time.monotonic()
    try:
        result = subprocess.run(
            ["sbatch", "--wait", "-N", "2", f"--output={out}", "run.sub"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job did not end in {JOB_TIMEOUT} s:\n{_job_output(tmp_path)}\n{cluster.logs()}")
    print(f"sbatch -N 2 run.sub, NEXP=2: {time.monotonic() - start:.0f} s")
    text = _job_output(tmp_path)
    assert result.returncode == 0, f"{result.stdout}{result.stderr}\n{text[-6000:]}\n{cluster.logs()}"
    assert "2 node(s) (node1 node2) x 1 GPUs, rendezvous 127.0.0.1:" in text
    prefix = f"bert_{config.stem.removeprefix('config_')}"
    assert sorted(p.name for p in logdir.glob(f"{prefix}_*.log")) == [f"{prefix}_1.log", f"{prefix}_2.log"]
    for i in (1, 2):
        log = (logdir / f"{prefix}_{i}.log").read_text()
        assert '"key": "run_stop"' in log and '"status": "success"' in log
        assert "--nnodes=2 --node_rank=0" in log and "--nnodes=2 --node_rank=1" in log  # a torchrun per node
        assert "SUCCESS" in (logdir / f"{prefix}_{i}.compliance.txt").read_text()
        effective = json.loads((logdir / f"{prefix}_{i}.config.json").read_text())
        assert effective["world_size"] == 2
    summary = json.loads((logdir / "summary.json").read_text())
    assert len(summary["runs"]) == 2
    assert "run.sub: 2 run(s) converged and passed compliance" in text


def _job_output(directory) -> str:
    return "\n".join(p.read_text() for p in sorted(directory.glob("slurm-*.out")))
