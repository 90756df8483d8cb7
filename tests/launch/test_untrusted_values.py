"""Values from the environment or a config are checked before they reach arithmetic or a command line
: a plain whole number, a known word, or a name without characters that change what the
command means. A value like `x[$(command)]` in shell arithmetic would run the command."""

import pytest

from tests.launch.helpers import SYSTEM, fake_host
from tests.launch.test_runtime_tunables import tunables

INJECTED = "PATH[$(touch {mark})]"  # run by bash's arithmetic if the value reaches it unchecked


def test_idle_max_state_is_not_evaluated(tmp_path):
    mark = tmp_path / "ran"
    root = fake_host(tmp_path / "host")
    result = tunables(str(tmp_path / "logs"), root=root, IDLE_MAX_STATE=INJECTED.format(mark=mark))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "IDLE_MAX_STATE=" in result.stderr and "a whole number" in result.stderr
    assert not mark.exists()


@pytest.mark.parametrize("name, value", [("THP_ENABLED", "sometimes"), ("THP_DEFRAG", "always never")])
def test_thp_modes_are_known_words(tmp_path, name, value):
    root = fake_host(tmp_path / "host")
    result = tunables(str(tmp_path / "logs"), root=root, **{name: value})
    assert result.returncode == 2 and f"{name}={value}" in result.stderr
    assert "[madvise]" in (root / "sys/kernel/mm/transparent_hugepage/enabled").read_text()


@pytest.mark.parametrize(
    "env, named",
    [
        ({"SLURM_NODEID": "1 --nproc_per_node=64"}, "SLURM_NODEID="),
        ({"MASTER_PORT": "29500x"}, "MASTER_PORT=29500x"),
        ({"MASTER_ADDR": "node1 --standalone"}, "MASTER_ADDR=node1 --standalone"),
    ],
)
def test_run_and_time_checks_what_goes_on_torchrun_s_command_line(launch, env, named):
    base = dict(BENCHMARK="bert", DGXNNODES="2", DGXNGPU="8", MASTER_ADDR="node1", SLURM_NODEID="1")
    result = launch.run("training/run_and_time.sh", **{**base, **env})
    assert result.returncode == 2, result.stdout + result.stderr
    assert named in result.stderr
    assert launch.module_calls("torch.distributed.run") == []


@pytest.mark.parametrize(
    "env, named",
    [
        ({"CONT": "--privileged"}, "CONT=--privileged"),
        ({"CONT": "mlperf/bert -v /:/host"}, "CONT=mlperf/bert -v /:/host"),
        ({"CONT_NAME": "a b"}, "CONT_NAME=a b"),
        ({"CONT_NAME": "--rm"}, "CONT_NAME=--rm"),
        ({"DATADIR": "{tmp}/da:ta"}, "DATADIR={tmp}/da:ta"),
    ],
)
def test_docker_s_command_line_gets_checked_values(docker_launch, env, named):
    env = {k: v.format(tmp=docker_launch.tmp) for k, v in env.items()}
    if "DATADIR" in env:
        (docker_launch.tmp / "da:ta").mkdir()
    result = docker_launch.run(**env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert named.format(tmp=docker_launch.tmp) in result.stderr
    assert docker_launch.calls() == []


@pytest.mark.parametrize(
    "env, named",
    [
        ({"BENCHMARK": "bert x"}, "BENCHMARK=bert x"),
        ({"CPU_DEMO": "maybe"}, "CPU_DEMO=maybe"),
    ],
)
def test_names_that_make_file_names_are_checked(launch, env, named):
    # as a user's shell after sourcing a config, with one value changed by hand
    values = {
        "BENCHMARK": "bert",
        "DGXSYSTEM": SYSTEM,
        "DGXNNODES": "1",
        "DGXNGPU": "2",
        "BATCHSIZE": "4",
        "LR": "0.001",
        "MLPERF_SUBMISSION_ORG": "testorg",
        **env,
    }
    result = launch.run(**values)
    assert result.returncode == 2, result.stdout + result.stderr
    assert named in result.stderr
    assert launch.calls() == []
