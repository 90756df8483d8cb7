"""run_with_docker.sh against a real engine: podman (and podman as `docker`), running Dockerfile.bert's image
built here, on the small default. Slow: the first run on a fresh machine builds the base image (a few
minutes), later ones reuse it; each training run takes seconds to a minute on 2 cores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.containers.small_default import REPO, config_values

pytestmark = [pytest.mark.slow, pytest.mark.containers]


def container_exists(env, name: str) -> bool:
    return subprocess.run(["podman", "container", "exists", name], env=env).returncode == 0


def launch_env(
    podman_env, tmp: Path, image: str, config: Path, datadir: Path, **extra: str
) -> dict[str, str]:
    (tmp / "fakeroot").mkdir(exist_ok=True)
    env = {k: v for k, v in podman_env.items() if k not in ("DGXSYSTEM", "CONFIG_FILE", "BENCHMARK")}
    env.update(
        CONFIG_FILE=str(config),
        DATADIR=str(datadir),
        LOGDIR=str(tmp / "results"),
        CONT=image,
        CONTAINER_RUNTIME="podman",
        CONT_NAME=f"mlperf_test_{os.getpid()}_{tmp.name}",
        TUNABLES_ROOT=str(tmp / "fakeroot"),
    )  # host tuning: a fake tree
    env.update(extra)
    return env


def run_launcher(env, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REPO / "run_with_docker.sh")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def docker_shim(tmp: Path, env: dict[str, str]) -> None:
    """`docker` meaning podman: a link first on PATH (as podman-docker installs)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "docker").symlink_to(
        subprocess.run(["which", "podman"], capture_output=True, text=True, check=True).stdout.strip()
    )
    env.update(PATH=f"{bin_dir}:{env['PATH']}", CONTAINER_RUNTIME="docker")


def test_image_has_the_toolkit_on_the_base_torch(podman_env, bert_image):
    code = (
        "import torch, mlperf_logging, h5py, training.bert.train, training.preflight; import os;"
        "print(torch.__version__, os.getcwd(), os.environ['BENCHMARK'])"
    )
    out = subprocess.run(
        ["podman", "run", "--rm", bert_image, "python3", "-c", code],
        env=podman_env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    assert out == ["2.13.0+cpu", "/workspace/code", "bert"]  # pip kept the base image's torch


# NEXP=2 in a container is in the demo tier: the launcher's NEXP loop runs for real in the SLURM test and
# with fakes in tests/launch; one trial covers the container path
@pytest.mark.parametrize("nexp", [1, pytest.param(2, marks=pytest.mark.demo)])
def test_end_to_end(podman_env, bert_image, small, tmp_path, nexp):
    config = small.derive(tmp_path, 1, 1)
    env = launch_env(podman_env, tmp_path, bert_image, config, small.datadir, NEXP=str(nexp))
    start = time.monotonic()
    result = run_launcher(env)
    print(f"run_with_docker.sh, podman, NEXP={nexp}: {time.monotonic() - start:.0f} s")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    logdir = Path(env["LOGDIR"])
    prefix = f"bert_{config.stem.removeprefix('config_')}"
    trials = range(1, nexp + 1)
    assert sorted(p.name for p in logdir.glob(f"{prefix}_*.log")) == [f"{prefix}_{i}.log" for i in trials]
    values = config_values(config)
    for i in trials:
        log = (logdir / f"{prefix}_{i}.log").read_text()
        assert (
            f"Beginning trial {i} of {nexp}" in log
            and '"key": "run_stop"' in log
            and '"status": "success"' in log
        )
        assert "SUCCESS" in (logdir / f"{prefix}_{i}.compliance.txt").read_text()
        effective = json.loads((logdir / f"{prefix}_{i}.config.json").read_text())["config"]
        assert effective["DATADIR"] == "/data" and effective["LOGDIR"] == "/results"  # mounted
        assert effective["BATCHSIZE"] == int(values["BATCHSIZE"]) and effective["LR"] == float(values["LR"])
    summary = json.loads((logdir / "summary.json").read_text())
    assert len(summary["runs"]) == nexp, summary
    assert (logdir / "summary.md").exists()
    assert "Removing container" in result.stdout and not container_exists(env, env["CONT_NAME"])


def test_failed_run_through_docker_shim_still_removes_the_container(podman_env, bert_image, small, tmp_path):
    values = config_values(small.derive(tmp_path, 1, 1))
    # One eval below an unreachable target (evaluations are scheduled below MAX_SAMPLES_TERMINATION), the
    # sample limit a step later: a quick "not converged" run (exit 1).
    config = small.derive(
        tmp_path,
        1,
        1,
        "_unreachable",
        TARGET_MLM_ACCURACY="0.99",
        MAX_SAMPLES_TERMINATION=str(int(values["EVAL_ITER_START_SAMPLES"]) + 1),
    )
    env = launch_env(podman_env, tmp_path, bert_image, config, small.datadir, NEXP="1")
    docker_shim(tmp_path, env)
    result = run_launcher(env)
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-4000:]
    assert "_1.log): not converged" in result.stderr, result.stderr[-2000:]  # the trainer's own outcome
    (log,) = Path(env["LOGDIR"]).glob("*_1.log")
    assert '"status": "aborted"' in log.read_text()
    assert (Path(env["LOGDIR"]) / "summary.md").exists()
    assert "Removing container" in result.stdout and not container_exists(env, env["CONT_NAME"])


def test_sigterm_mid_run_removes_the_container(podman_env, bert_image, small, tmp_path):
    config = small.derive(tmp_path, 1, 1)
    env = launch_env(podman_env, tmp_path, bert_image, config, small.datadir, NEXP="2")
    docker_shim(tmp_path, env)
    proc = subprocess.Popen(
        ["bash", str(REPO / "run_with_docker.sh")],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    logdir = Path(env["LOGDIR"])
    deadline = time.monotonic() + 300
    while not any('"key": "run_start"' in p.read_text() for p in logdir.glob("*_1.log")):  # training, timed
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        assert time.monotonic() < deadline, "the first run did not start"
        time.sleep(0.2)
    assert container_exists(env, env["CONT_NAME"])
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out[-4000:]
    assert "caught SIGTERM" in out and "Removing container" in out
    assert not container_exists(env, env["CONT_NAME"])
    (log,) = logdir.glob("*.log")  # the stopped run's partial log; no second run, no score
    assert '"key": "run_start"' in log.read_text() and "run stopped by SIGTERM" in log.read_text()
    assert '"key": "run_stop"' not in log.read_text()
    assert not (logdir / "summary.md").exists()
