"""training/run_and_time.sh turns the environment into the right torchrun command (seen by a fake PYTHON)."""

import re

import pytest

from tests.launch.helpers import REPO


def run_and_time(launch, **env):
    base = dict(BENCHMARK="bert", DGXNNODES="1", DGXNGPU="8", RUN_TAG="t", MLPERF_SUBMISSION_ORG="acme")
    return launch.run("training/run_and_time.sh", **{**base, **env})


def torchrun_argv(launch):
    (call,) = launch.module_calls("torch.distributed.run")
    return call.argv


def test_single_node_is_standalone(launch):
    result = run_and_time(launch)
    assert result.returncode == 0, result.stderr
    assert torchrun_argv(launch) == [
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=8",
        "--standalone",
        "-m",
        "training.bert.train",
    ]
    assert launch.calls("python")[0].env["CWD"] == str(REPO)
    assert "STARTING TIMING RUN AT " in result.stdout and "ENDING TIMING RUN AT " in result.stdout
    assert re.search(r"^RESULT,bert,,\d+,acme,\d{4}-\d\d-\d\d ", result.stdout, re.M)


def test_multi_node_uses_rendezvous_from_slurm(launch):
    result = run_and_time(launch, DGXNNODES="4", MASTER_ADDR="node001", MASTER_PORT="1234", SLURM_NODEID="2")
    assert result.returncode == 0, result.stderr
    assert torchrun_argv(launch) == [
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=8",
        "--nnodes=4",
        "--node_rank=2",
        "--rdzv_endpoint=node001:1234",
        "-m",
        "training.bert.train",
    ]


def test_multi_node_needs_master_addr_and_node_rank(launch):
    result = run_and_time(launch, DGXNNODES="2", SLURM_NODEID="0")
    assert result.returncode != 0 and "MASTER_ADDR" in result.stderr
    result = run_and_time(launch, DGXNNODES="2", MASTER_ADDR="node001")
    assert result.returncode != 0 and "SLURM_NODEID" in result.stderr
    assert launch.module_calls("torch.distributed.run") == []


def test_the_entry_comes_from_the_benchmark_table(launch):
    assert run_and_time(launch, BENCHMARK="llama31_8b").returncode == 0
    assert torchrun_argv(launch)[-2:] == ["-m", "training.llama31_8b.train"]


def test_an_unknown_benchmark_is_named(launch):
    result = run_and_time(launch, BENCHMARK="llama31_8x")
    assert result.returncode == 2 and "BENCHMARK=llama31_8x is not one of bert, llama31_8b" in result.stderr
    assert launch.module_calls("torch.distributed.run") == []


def test_exit_status_is_torchrun_s(launch):
    result = run_and_time(launch, RUN_TAG="bad", FAKE_FAIL_TAGS="bad")
    assert result.returncode == 1
    assert "ENDING TIMING RUN AT" in result.stdout and "RESULT,bert,," in result.stdout


@pytest.mark.parametrize(
    "env, named",
    [
        ({"BENCHMARK": "resnet"}, "BENCHMARK=resnet"),
        ({"BENCHMARK": ""}, "BENCHMARK"),
        ({"DGXNGPU": ""}, "DGXNGPU"),
        ({"DGXNGPU": "eight"}, "DGXNGPU=eight"),
        ({"DGXNNODES": "0"}, "DGXNNODES=0"),
    ],
)
def test_bad_settings_are_named(launch, env, named):
    result = run_and_time(launch, **env)
    assert result.returncode != 0
    assert named in result.stderr
    assert launch.module_calls("torch.distributed.run") == []
