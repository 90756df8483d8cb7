"""AMD's and NVIDIA's commands as their READMEs type them: a bare CONFIG_FILE name, a shell that sourced a
vendor config naming neither itself nor its benchmark, CLEAR_CACHES=true, a relative LOGDIR taken from the
launcher's folder as AMD's run_with_docker.sh takes it, MODEL mounted at /model."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.launch.helpers import REPO

# AMD's LoRA config, as its v5.1 config_MI355X_1x8x1.sh writes it (trimmed): no CONFIG_FILE, no BENCHMARK.
AMD_LORA = """\
#!/bin/bash
export WARMUP=True
export DGXNGPU=2
export DGXSYSTEM=$(basename $(readlink -f ${BASH_SOURCE[0]}) | sed 's/^config_//' | sed 's/\\.sh$//' )
export DGXNNODES=1
export WALLTIME_MINUTES=50
export WALLTIME=$(( (${NEXP:-1} * WALLTIME_MINUTES) ))
export TP=1 PP=1 CP=1 SP=False MBS=1 LR=0.0004 MINIBS=1 SKIP_EVALS=3 VAL_CHECK_INTERVAL=384
export FP8=True FP8_AMAX_ALGO=most_recent FP8_AMAX_HISTORY=4 LORA_A2A=1
export MLPERF_SUBMISSION_ORG="AMD"
"""
# AMD's 8B config names its scale NNODES and GPUS_PER_NODE only.
AMD_8B = """\
export NNODES=1
export GPUS_PER_NODE=2
export SIZE="8b" GBS=32 MBS=2 MAX_LR="8e-4" WARMUP_STEPS=128 EVAL_EVERY=12288 START_EVAL_AT=0
export DGXSYSTEM=$(basename $(readlink -f ${BASH_SOURCE[0]}) | sed 's/^config_//' | sed 's/\\.sh$//' )
"""


def user_shell(launch, config: Path, cwd: Path, **extra: str) -> subprocess.CompletedProcess:
    """`cd CWD; source CONFIG; bash run_with_docker.sh`, the vendor README's commands."""
    env = {k: v for k, v in {**launch.env, **extra}.items() if k != "CONFIG_FILE"}
    return subprocess.run(
        [
            "bash",
            "-c",
            'source "$1" && exec bash "$2"',
            "user-shell",
            str(config),
            str(REPO / "run_with_docker.sh"),
        ],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_bare_config_file_name_is_found_under_configs(launch):
    """AMD's BERT blog: export CONFIG_FILE=config_MI300X_1x8x48.sh, its configs beside its launcher."""
    result = launch.run(CONFIG_FILE="config_MI300X_1x8x48.sh", LOGDIR_MB_PER_RUN="0")
    shipped = REPO / "configs" / "bert" / "config_MI300X_1x8x48.sh"
    assert f"CONFIG_FILE=config_MI300X_1x8x48.sh: {shipped} (not in this folder" in result.stdout
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = launch.module_calls("torch.distributed.run")
    assert run.env["DGXSYSTEM"] == "MI300X_1x8x48" and run.env["BATCHSIZE"] == "48"
    result = launch.run(CONFIG_FILE="config_NOPE_1x1x1.sh")
    assert result.returncode == 2 and "CONFIG_FILE=config_NOPE_1x1x1.sh: no such file here" in result.stderr


def test_a_sourced_vendor_config_is_found_and_its_benchmark_told(launch):
    """AMD's LoRA README: `source config_MI355X_1x8x1.sh`, then `bash run_with_docker.sh`, in its folder."""
    folder = launch.tmp / "amd"
    folder.mkdir()
    config = folder / "config_MI355X_1x2x1.sh"
    config.write_text(AMD_LORA)
    result = user_shell(launch, config, folder)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"the config sourced is {config} (config_MI355X_1x2x1.sh, every name it exports" in result.stdout
    assert "BENCHMARK=llama2_70b_lora: the config does not export it; its names" in result.stderr
    assert [p.name for p in launch.logdir.glob("*.log")] == ["llama2_70b_lora_MI355X_1x2x1_1.log"]
    (run,) = launch.module_calls("torch.distributed.run")
    assert {"LORA_A2A", "FP8_AMAX_HISTORY", "WALLTIME_MINUTES"} <= set(run.env["CONFIG_VARS"].split())


def test_a_sourced_config_that_cannot_be_found_says_what_to_do(launch):
    folder, elsewhere = launch.tmp / "amd", launch.tmp / "elsewhere"
    folder.mkdir(), elsewhere.mkdir()
    config = folder / "config_MI355X_1x2x1.sh"
    config.write_text(AMD_LORA)
    result = user_shell(launch, config, elsewhere)
    assert result.returncode == 2 and launch.calls() == []
    assert (
        "DGXSYSTEM=MI355X_1x2x1 is set but CONFIG_FILE is not, and no config_MI355X_1x2x1.sh" in result.stderr
    )
    assert "export CONFIG_FILE=<the file you sourced>" in result.stderr
    # a file of its name that exports what this shell lacks is not the one sourced
    (elsewhere / config.name).write_text(AMD_LORA + "export EXTRA=1\n")
    result = user_shell(launch, config, elsewhere)
    assert result.returncode == 2 and launch.calls() == []
    assert f"{elsewhere / config.name} (exports EXTRA, which this shell has not)" in result.stderr
    # a copy that exports the same names is taken (the values that run are this shell's)
    (elsewhere / config.name).write_text(AMD_LORA)
    result = user_shell(launch, config, elsewhere)
    assert result.returncode == 0, result.stderr
    assert f"the config sourced is {elsewhere / config.name}" in result.stdout


def test_amds_8b_scale_names_reach_the_launcher(launch):
    folder = launch.tmp / "amd8b"
    folder.mkdir()
    config = folder / "config_MI355X_1x2x1_8b.sh"
    config.write_text(AMD_8B)
    result = launch.run(CONFIG_FILE=str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "DGXNGPU=2: from GPUS_PER_NODE" in result.stderr and "BENCHMARK=llama31_8b" in result.stderr
    (run,) = launch.module_calls("torch.distributed.run")
    assert run.argv[2:4] == ["--nproc_per_node=2", "--standalone"]


def test_clear_caches_takes_true_and_false(launch):
    assert launch.run(CLEAR_CACHES="true").returncode == 0
    assert launch.module_calls("torch.distributed.run")[-1].env["CLEAR_CACHES"] == "1"
    result = launch.run(CLEAR_CACHES="false")
    assert result.returncode == 0 and "CLEAR_CACHES=0: page cache not dropped" in result.stdout


def test_a_relative_logdir_is_the_launchers_folders_and_is_said(launch):
    """AMD's run_with_docker.sh changes to its own folder first: LOGDIR=./results is beside it, wherever the
    user stands (here the test's folder: the logs do not go there)."""
    target = launch.tmp / "beside-the-launcher"
    relative = os.path.relpath(target, REPO)
    result = launch.run(LOGDIR=relative)
    assert result.returncode == 0, result.stderr
    assert f"Logs: {target} (LOGDIR={relative}, from the launcher's folder" in result.stdout
    assert len(list(target.glob("bert_*_1.log"))) == 1


def test_model_is_mounted_at_model(docker_launch):
    model = docker_launch.tmp / "model"
    model.mkdir()
    assert docker_launch.run(MODEL=str(model)).returncode == 0
    (run,) = [c.argv for c in docker_launch.calls("docker") if c.argv[0] == "run"]
    assert f"--volume={model}:/model" in run and "--env=MODEL=/model" in run
    result = docker_launch.run(MODEL=str(docker_launch.tmp / "none"))
    assert result.returncode == 2 and "MODEL=" in result.stderr and "no such directory" in result.stderr
