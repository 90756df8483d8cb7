"""run_with_docker.sh end to end with fakes: CONTAINER_RUNTIME=none with a fake PYTHON, and docker/podman
with a fake engine. Each test takes well under a second or two."""

import signal

import pytest

from tests.launch.helpers import CONFIG_NAMES, PREFIX, SYSTEM, process_alive, stop_and_wait, wait_for


def test_nexp_runs_give_numbered_logs_and_a_score(launch):
    result = launch.run(NEXP="2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert launch.logs() == [f"{PREFIX}_1.log", f"{PREFIX}_2.log"]
    log = (launch.logdir / f"{PREFIX}_1.log").read_text()
    assert "Beginning trial 1 of 2" in log and '"key": "run_stop"' in log and "RESULT,bert,," in log
    assert "Beginning trial 2 of 2" in result.stdout
    assert [c.argv for c in launch.module_calls("training.preflight")] == [["-m", "training.preflight"]]
    assert [c.argv[2] for c in launch.module_calls("training.scoring.compliance")] == [
        str(launch.logdir / f"{PREFIX}_{i}.log") for i in (1, 2)
    ]
    assert [c.argv[2] for c in launch.module_calls("training.scoring")] == [str(launch.logdir)]
    assert len(list(launch.logdir.glob("runtime_tunables_*.txt"))) == 2  # before each run


def test_each_run_gets_its_tag_seed_and_config(launch):
    assert launch.run(NEXP="2").returncode == 0
    runs = launch.module_calls("torch.distributed.run")
    assert [r.env["RUN_TAG"] for r in runs] == [f"{PREFIX}_1", f"{PREFIX}_2"]
    seeds = [r.env["SEED"] for r in runs]
    assert all(s.isdigit() for s in seeds) and seeds[0] != seeds[1]
    for run in runs:
        assert run.env["CLEAR_CACHES"] == "1"
        assert sorted(run.env["CONFIG_VARS"].split()) == CONFIG_NAMES
        assert run.env["DGXSYSTEM"] == SYSTEM and run.env["BATCHSIZE"] == "4"
        assert run.env["DATADIR"] == str(launch.tmp / "data") and run.env["LOGDIR"] == str(launch.logdir)
        assert run.argv[2:4] == ["--nproc_per_node=2", "--standalone"]


def test_a_fixed_seed_repeats_runs_and_a_bad_one_is_refused(launch):
    assert launch.run(NEXP="2", SEED="41").returncode == 0
    assert [r.env["SEED"] for r in launch.module_calls("torch.distributed.run")] == ["41", "42"]
    result = launch.run(SEED="4x")
    assert result.returncode == 2 and "SEED=4x: not a non-negative integer" in result.stderr


def test_a_second_invocation_adds_logs(launch):
    assert launch.run(NEXP="2").returncode == 0
    first = (launch.logdir / f"{PREFIX}_1.log").read_text()
    (launch.logdir / f"{PREFIX}_x.log").write_text("not a run log\n")
    (launch.logdir / f"bert_{SYSTEM}_fp8_9.log").write_text("another system's log\n")
    assert launch.run(NEXP="2").returncode == 0
    expected = [f"{PREFIX}_{i}.log" for i in (1, 2, 3, 4)] + [f"{PREFIX}_x.log", f"bert_{SYSTEM}_fp8_9.log"]
    assert launch.logs() == sorted(expected)
    assert (launch.logdir / f"{PREFIX}_1.log").read_text() == first


def test_a_failed_run_is_recorded_and_the_loop_goes_on(launch):
    result = launch.run(NEXP="3", FAKE_FAIL_TAGS=f"{PREFIX}_2")
    assert result.returncode == 1
    assert len(launch.module_calls("torch.distributed.run")) == 3
    assert len(launch.module_calls("training.scoring")) == 1
    assert f"trial 2 ({launch.logdir / PREFIX}_2.log): not converged: fake" in result.stderr
    assert "trial 1 " not in result.stderr and "trial 3 " not in result.stderr


def test_a_failed_run_is_named_by_its_own_outcome(launch):
    """torchrun's exit 1 says only that a worker failed; the trainer's outcome file says
    what failed, and a run that wrote none is not called "not converged"."""
    data_error = '{"status": "data_error", "detail": "part_00003 unreadable", "rank": 0, "time": 1}'
    result = launch.run(NEXP="3", FAKE_FAIL_TAGS=f"{PREFIX}_1 {PREFIX}_3", FAKE_FAIL_OUTCOME=data_error)
    assert result.returncode == 1
    assert f"trial 1 ({launch.logdir / PREFIX}_1.log): data error: part_00003 unreadable" in result.stderr
    assert f"trial 3 ({launch.logdir / PREFIX}_3.log): data error: part_00003 unreadable" in result.stderr
    result = launch.run(NEXP="1", FAKE_FAIL_TAGS=f"{PREFIX}_4", FAKE_FAIL_OUTCOME="")
    no_outcome = f"trial 1 ({launch.logdir / PREFIX}_4.log): exit 1, the trainer wrote no outcome"
    assert no_outcome in result.stderr and "not converged" not in result.stderr


def test_a_failed_compliance_check_fails_the_invocation(launch):
    result = launch.run(NEXP="2", FAKE_COMPLIANCE_FAIL=f"{PREFIX}_1.log")
    assert result.returncode == 1
    assert "trial 1" in result.stderr and "compliance check failed" in result.stderr
    assert len(launch.module_calls("torch.distributed.run")) == 2


def test_a_failed_score_fails_the_invocation(launch):
    result = launch.run(FAKE_SCORING_RC="1")
    assert result.returncode == 1 and "scoring of" in result.stderr
    assert f"see {launch.logdir}/summary.md" in result.stderr


def test_a_summary_that_was_not_written_is_not_pointed_to(launch):
    result = launch.run(FAKE_SCORING_RC="2")
    assert result.returncode == 1
    failed = f"scoring of {launch.logdir} failed (exit 2): no summary written, its error is above"
    assert failed in result.stderr
    assert "summary.md" not in result.stderr + result.stdout


def test_a_failed_preflight_starts_no_run(launch):
    result = launch.run(NEXP="2", FAKE_PREFLIGHT_RC="3")
    assert result.returncode == 2 and "preflight failed (exit 3)" in result.stderr
    assert launch.module_calls("torch.distributed.run") == [] and launch.logs() == []


def test_cache_drop_that_fails_is_reported_and_logged_as_not_cleared(launch):
    result = launch.run(DROPCACHE_CMD="false")
    assert result.returncode == 0, result.stderr
    assert "could not drop the page cache" in result.stdout  # the trial's messages go through its log
    (run,) = launch.module_calls("torch.distributed.run")
    assert run.env["CLEAR_CACHES"] == "0"
    assert "could not drop the page cache" in (launch.logdir / f"{PREFIX}_1.log").read_text()


def test_clear_caches_off(launch):
    assert launch.run(CLEAR_CACHES="0", DROPCACHE_CMD="false").returncode == 0
    (run,) = launch.module_calls("torch.distributed.run")
    assert run.env["CLEAR_CACHES"] == "0"


def test_a_sourced_config_is_used_as_is(launch):
    # The user sourced the config: DGXSYSTEM, CONFIG_FILE (the config names itself) and the values are in the
    # environment; the values are this shell's, not read again from the file.
    env = {
        "BENCHMARK": "bert",
        "DGXSYSTEM": SYSTEM,
        "DGXNNODES": "1",
        "DGXNGPU": "2",
        "BATCHSIZE": "7",
        "LR": "0.001",
        "MLPERF_SUBMISSION_ORG": "testorg",
    }
    result = launch.run(**env)
    assert result.returncode == 0, result.stderr
    (run,) = launch.module_calls("torch.distributed.run")
    assert run.env["BATCHSIZE"] == "7"


def test_config_and_sourced_system_must_agree(launch):
    result = launch.run(DGXSYSTEM="MI300X_1x8x48")
    assert result.returncode == 2 and "not the config of DGXSYSTEM=MI300X_1x8x48" in result.stderr


@pytest.mark.parametrize(
    "env, named",
    [
        ({"DATADIR": ""}, "DATADIR not set"),
        ({"DATADIR": "/no/such/data"}, "DATADIR=/no/such/data: no such directory"),
        ({"CONFIG_FILE": "/no/such/config_X.sh"}, "CONFIG_FILE=/no/such/config_X.sh: no such file"),
        ({"CONFIG_FILE": ""}, "CONFIG_FILE"),
        ({"NEXP": "ten"}, "NEXP=ten"),
        ({"CLEAR_CACHES": "sometimes"}, "CLEAR_CACHES=sometimes"),
        ({"CONTAINER_RUNTIME": "lxc"}, "CONTAINER_RUNTIME=lxc"),
        ({"CONTAINER_RUNTIME": "docker"}, "CONT not set"),
        ({"DGXNNODES": "2", "DGXSYSTEM": SYSTEM, "BENCHMARK": "bert"}, "DGXNNODES=2: this script runs one"),
    ],
)
def test_setup_errors_name_the_variable(launch, env, named):
    result = launch.run(**env)
    assert result.returncode != 0
    assert named in result.stderr
    # nothing ran (a data folder's error only asks the table for the command that prepares it)
    assert [c for c in launch.calls() if c.argv[:2] != ["-m", "training.prepare_hint"]] == []


def test_a_config_variable_missing_from_the_shell_is_named(launch):
    # DGXSYSTEM set means "the user sourced the config"; here they exported only part of it.
    result = launch.run(DGXSYSTEM=SYSTEM, BENCHMARK="bert", DGXNNODES="1", DGXNGPU="2")
    assert result.returncode == 2
    assert "not exported in this shell: BATCHSIZE LR MLPERF_SUBMISSION_ORG" in result.stderr


def test_sigterm_stops_the_run_and_keeps_its_partial_log(launch):
    proc = launch.start(NEXP="3", FAKE_SLEEP_TAGS=f"{PREFIX}_2")
    pidfile = launch.tmp / "state" / f"{PREFIX}_2.pid"
    wait_for(pidfile.exists, what="the second run to start")
    log = launch.logdir / f"{PREFIX}_2.log"
    wait_for(lambda: "FAKE TRAINING STARTED" in log.read_text(), what="the run's output in its log")
    rc, out = stop_and_wait(proc, signal.SIGTERM)
    assert rc == 143, out
    assert "caught SIGTERM" in out
    assert "STARTING TIMING RUN" in log.read_text()
    wait_for(lambda: not process_alive(int(pidfile.read_text())), timeout=5, what="the training to end")
    assert launch.logs() == [f"{PREFIX}_1.log", f"{PREFIX}_2.log"]  # no third run
    assert launch.module_calls("training.scoring") == []


@pytest.mark.parametrize(
    "sigint", [None, signal.SIG_IGN], ids=["sigint-as-pytest-has-it", "sigint-ignored-as-in-a-scripts-job"]
)
def test_sigint_exits_130(launch, sigint):
    """kill -INT stops the run, also of a launcher started as a script's `cmd &` job, which the shell starts
    with SIGINT ignored and bash cannot trap. A pytest started so (`./test.sh >log &`) passes that on to each
    launcher it starts: how this test once waited out the run's 60 s in the full suite."""
    proc = launch.start(FAKE_SLEEP_TAGS=f"{PREFIX}_1", sigint=sigint)
    pidfile = launch.tmp / "state" / f"{PREFIX}_1.pid"
    wait_for(pidfile.exists, what="the run to start")
    rc, out = stop_and_wait(proc, signal.SIGINT)
    assert rc == 130, out
    assert "caught SIGINT" in out and "was started with SIGINT ignored" not in out
    assert "run_with_docker.sh: run stopped by SIGINT" in (launch.logdir / f"{PREFIX}_1.log").read_text()
    # the run got the signal that arrived, so its outcome names it (the fake trainer writes what it caught)
    assert '"detail": "SIGINT"' in (launch.logdir / f"{PREFIX}_1.outcome.json").read_text()
    wait_for(lambda: not process_alive(int(pidfile.read_text())), timeout=5, what="the training to end")


# ---- with a container engine (the fake docker, or podman through the same fake) ----


def test_docker_one_container_for_all_runs(docker_launch):
    launch = docker_launch
    result = launch.run(NEXP="2")
    assert result.returncode == 0, result.stdout + result.stderr
    calls = launch.calls("docker")
    runs = [c.argv for c in calls if c.argv[0] == "run"]
    assert len(runs) == 1
    run = runs[0]
    assert run[:4] == ["run", "--rm", "--init", "--detach"]
    assert run[-3:] == ["mlperf/bert:test", "sleep", "infinity"]
    flags = {"--name=mlperf_bert", "--net=host", "--uts=host", "--ipc=host"}
    assert "--security-opt=seccomp=unconfined" in run
    assert flags <= set(run)
    assert f"--volume={launch.tmp / 'data'}:/data" in run and f"--volume={launch.logdir}:/results" in run
    for name in CONFIG_NAMES:
        assert run.count(f"--env={name}") == 1, name
    assert {"--env=CONFIG_VARS", "--env=DATADIR=/data", "--env=LOGDIR=/results"} <= set(run)
    # a preflight, then per run: run_and_time.sh and the compliance check; then the score; then removal
    execs = [c.argv for c in calls if c.argv[0] == "exec"]
    assert execs[0] == ["exec", "mlperf_bert", "python3", "-m", "training.preflight"]
    trials = [e for e in execs if e[-1] == "training/run_and_time.sh"]
    assert [e[1] for e in trials] == [f"--env=RUN_TAG={PREFIX}_1", f"--env=RUN_TAG={PREFIX}_2"]
    assert all(
        e[3] == "--env=CLEAR_CACHES=1"
        and e[4] == f"--env=CONFIG_FILENAME=config_{SYSTEM}.sh"
        and e[5:] == ["mlperf_bert", "bash", "training/run_and_time.sh"]
        for e in trials
    )
    assert execs[-1] == ["exec", "mlperf_bert", "python3", "-m", "training.scoring", "/results"]
    compliance = [e[-1] for e in execs if "training.scoring.compliance" in e]
    assert compliance == [f"/results/{PREFIX}_1.log", f"/results/{PREFIX}_2.log"]
    assert calls[-1].argv == ["container", "rm", "-f", "mlperf_bert"]
    # inside the "container" the trainer sees the container paths and the config's values
    (first, second) = launch.module_calls("torch.distributed.run")
    assert (first.env["DATADIR"], first.env["LOGDIR"], first.env["BATCHSIZE"]) == ("/data", "/results", "4")
    assert launch.logs() == [f"{PREFIX}_1.log", f"{PREFIX}_2.log"]


def test_docker_stale_container_removed_first(docker_launch):
    result = docker_launch.run(FAKE_DOCKER_STALE="1")
    assert result.returncode == 0, result.stderr
    argv = [c.argv for c in docker_launch.calls("docker")]
    assert argv[:3] == [
        ["container", "inspect", "mlperf_bert"],
        ["container", "rm", "-f", "mlperf_bert"],
        argv[2],
    ]
    assert argv[2][0] == "run"


def test_docker_gpu_flags(docker_launch):
    result = docker_launch.run()
    assert "no /dev/kfd (AMD) and no nvidia-smi (NVIDIA)" in result.stderr
    nvidia_smi = docker_launch.tmp / "bin" / "nvidia-smi"
    nvidia_smi.write_text("#!/bin/sh\nexit 0\n")
    nvidia_smi.chmod(0o755)
    docker_launch.env["FAKE_CALLS"] += ".2"
    assert docker_launch.run(CONT_NAME="other").returncode == 0
    (run,) = [c.argv for c in docker_launch.calls("docker") if c.argv[0] == "run"]
    assert "--gpus=all" in run and "--name=other" in run


def test_docker_container_removed_on_failure(docker_launch):
    result = docker_launch.run(FAKE_FAIL_TAGS=f"{PREFIX}_1", FAKE_COMPLIANCE_FAIL=f"{PREFIX}_1.log")
    assert result.returncode == 1
    assert docker_launch.calls("docker")[-1].argv == ["container", "rm", "-f", "mlperf_bert"]


def test_docker_sigterm_removes_the_container(docker_launch):
    proc = docker_launch.start(NEXP="2", FAKE_SLEEP_TAGS=f"{PREFIX}_1")
    pidfile = docker_launch.tmp / "state" / f"{PREFIX}_1.pid"
    wait_for(pidfile.exists, what="the run to start")
    rc, out = stop_and_wait(proc, signal.SIGTERM)
    assert rc == 143, out
    assert docker_launch.calls("docker")[-1].argv == ["container", "rm", "-f", "mlperf_bert"]
    assert "STARTING TIMING RUN" in (docker_launch.logdir / f"{PREFIX}_1.log").read_text()


def test_podman(docker_launch):
    result = docker_launch.run(CONTAINER_RUNTIME="podman")
    assert result.returncode == 0, result.stderr
    assert docker_launch.calls("docker") == []
    progs = {c.prog for c in docker_launch.calls() if c.prog != "python"}
    assert progs == {"podman"}


def test_check_compliance_0_skips_the_checker_and_other_values_are_refused(launch):
    result = launch.run(NEXP="2", CHECK_COMPLIANCE="0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert launch.module_calls("training.scoring.compliance") == []
    assert "CHECK_COMPLIANCE=0: compliance check not run" in result.stdout
    result = launch.run(CHECK_COMPLIANCE="yes")
    assert result.returncode == 2 and "CHECK_COMPLIANCE=yes: expected 0 or 1" in result.stderr
