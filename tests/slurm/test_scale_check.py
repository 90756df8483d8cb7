"""The arithmetic check of configs derived for other machines (docs/custom_configs.md): the name's
<NODES>x<GPUS>x<BATCHSIZE> against the values, nodes x GPUs against the launcher's world size, a whole GBS."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.containers.small_default import REPO
from training.bert import preflight
from training.bert.config import BertConfig

DOC = REPO / "docs" / "custom_configs.md"
BASE = {"DATADIR": "/data", "BATCHSIZE": "48", "LR": "0.00096", "MAX_STEPS": "3680"}


def sourced(config: Path) -> tuple[dict[str, str], list[str]]:
    env_out, names = (
        subprocess.run(
            ["bash", "-c", f'. "$0" && {cmd}', str(config)],
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for cmd in ("env", "compgen -e")
    )
    env = dict(line.split("=", 1) for line in env_out.splitlines() if "=" in line)
    return env, [n for n in names.split() if n not in ("PATH", "PWD", "SHLVL", "_")]


@pytest.mark.parametrize(
    "config", sorted((REPO / "configs" / "bert").glob("config_*.sh")), ids=lambda p: p.name
)
def test_shipped_configs_pass(config):
    env, names = sourced(config)
    cfg = BertConfig.from_env({"DATADIR": "/data", **env}, names)
    assert cfg.scale_problems(cfg.world_size()) == []


def test_the_documented_4_gpu_config_keeps_the_global_batch(tmp_path):
    block = re.search(r"```bash\n(# configs/bert/config_H100_1x4x48.sh.*?)```", DOC.read_text(), re.S)[1]
    shutil.copy(REPO / "configs" / "bert" / "config_H100_1x8x48.sh", tmp_path)
    derived = tmp_path / "config_H100_1x4x48.sh"
    derived.write_text(block)
    env, names = sourced(derived)
    assert env["DGXSYSTEM"] == "H100_1x4x48"
    cfg = BertConfig.from_env({"DATADIR": "/data", **env}, names)
    assert cfg.scale_problems(4) == []
    original = BertConfig.from_env({"DATADIR": "/data", **sourced(tmp_path / "config_H100_1x8x48.sh")[0]})
    assert cfg.global_batch_size(cfg.world_size()) == original.global_batch_size(8) == 768


@pytest.mark.parametrize(
    "env, world, problems",
    [
        (
            {"DGXSYSTEM": "H100_1x4x48", "DGXNGPU": "8"},
            None,
            ["DGXSYSTEM=H100_1x4x48 says DGXNGPU=4, but the config sets DGXNGPU=8"],
        ),
        (
            {"DGXSYSTEM": "X_2x8x48", "DGXNNODES": "2", "DGXNGPU": "8"},
            8,
            ["DGXNNODES=2 x DGXNGPU=8 = 16 ranks, but the launcher starts 8"],
        ),
        (
            {"DGXSYSTEM": "X_1x1x3_odd", "BATCHSIZE": "3", "PACKING_FACTOR": "1.5"},
            1,
            [
                "global batch BATCHSIZE x GRADIENT_STEPS x 1 ranks x PACKING_FACTOR = 4.5 "
                "samples is not a whole "
                "number"
            ],
        ),
        ({"DGXSYSTEM": "MI300X_1x8x48", "DGXNGPU": "8"}, 8, []),
        ({"DGXSYSTEM": "DGXH100_1x8x48x1_pack", "DGXNGPU": "8"}, None, []),  # another convention: not read
    ],
)
def test_scale_problems(env, world, problems):
    assert BertConfig.from_env({**BASE, **env}).scale_problems(world) == problems


def test_preflight_checks_the_launchers_world_size(tmp_path):
    from tests.bert.synthetic import write_dataset

    data = write_dataset(tmp_path)
    env = {
        "DATADIR": str(data),
        "BATCHSIZE": "4",
        "LR": "0.01",
        "MAX_STEPS": "10",
        "INIT_CHECKPOINT": "none",
        "EVAL_ITER_START_SAMPLES": "80",
        "EVAL_ITER_SAMPLES": "80",
        "CPU_DEMO": "1",
        "DGXSYSTEM": "CPU_2x1x4",
        "DGXNNODES": "2",
        "DGXNGPU": "1",
    }
    assert preflight.check(env) == []
    assert preflight.check({**env, "LAUNCH_WORLD_SIZE": "2"}) == []
    assert preflight.check({**env, "LAUNCH_WORLD_SIZE": "3"}) == [
        "DGXNNODES=2 x DGXNGPU=1 = 2 ranks, but the launcher starts 3"
    ]
    assert preflight.check({**env, "DGXNGPU": "2"}) == [
        "DGXSYSTEM=CPU_2x1x4 says DGXNGPU=1, but the config sets DGXNGPU=2"
    ]
