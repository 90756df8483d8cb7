"""Config parsing: typed values, and errors that name the variable."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from training.bert.config import BertConfig
from training.common.config import (
    ConfigError,
    RunSettings,
    system_from_config_path,
    to_env_dict,
    write_effective_config,
)

ROOT = Path(__file__).resolve().parents[1]
BASE = {"DATADIR": "/data", "BATCHSIZE": "48", "LR": "0.00096", "MAX_STEPS": "4000"}


def test_values_are_typed_and_defaults_apply():
    cfg = BertConfig.from_env({**BASE, "MAX_SAMPLES_TERMINATION": "4.5e6", "COMPILE": "yes"})
    assert cfg.batch_size == 48 and cfg.lr == 0.00096 and cfg.max_samples_termination == 4_500_000
    assert cfg.compile is True and cfg.target_accuracy == 0.720 and cfg.seed is None
    assert to_env_dict(cfg)["DATADIR"] == "/data"


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"BATCHSIZE": None}, "BATCHSIZE: required"),
        ({"BATCHSIZE": "forty"}, "BATCHSIZE='forty'"),
        ({"BATCHSIZE": "4.5"}, "whole number"),
        ({"COMPILE": "maybe"}, "COMPILE='maybe'"),
        ({"ATTENTION": "fast"}, "ATTENTION='fast'"),
        ({"TARGET_MLM_ACCURACY": "72"}, "TARGET_MLM_ACCURACY=72.0"),
        ({"BATCHSIZE": "0"}, "BATCHSIZE=0 must be > 0"),
        ({"RESIDUAL_DTYPE": "half"}, "RESIDUAL_DTYPE='half'"),
        ({"RESIDUAL_DTYPE": "bf16", "PRECISION": "fp32"}, "RESIDUAL_DTYPE=bf16 needs PRECISION bf16 or fp8"),
        (
            {"ATTENTION": "cudnn_ragged", "COMPILE": "1", "COMPILE_MODE": "reduce-overhead"},
            "ATTENTION=cudnn_ragged with COMPILE_MODE=reduce-overhead (CUDA graphs)",
        ),
    ],
)
def test_errors_name_the_variable(env, needle):
    merged = {k: v for k, v in {**BASE, **env}.items() if v is not None}
    with pytest.raises(ConfigError, match=None) as err:
        BertConfig.from_env(merged)
    assert needle in str(err.value)


def test_unknown_config_variable_suggests_the_closest_name():
    with pytest.raises(ConfigError) as err:
        BertConfig.from_env(
            BASE, config_vars=["BATCHSIZE", "OPT_LAMB_BETA1", "NCCL_DEBUG", "HIP_FORCE_DEV_KERNARG"]
        )
    assert "OPT_LAMB_BETA1: not a variable of this benchmark (did you mean OPT_LAMB_BETA_1?)" in str(
        err.value
    )
    assert "NCCL_DEBUG" not in str(err.value)


def test_all_problems_reported_at_once():
    with pytest.raises(ConfigError) as err:
        BertConfig.from_env({"DATADIR": "/d", "LR": "x"})
    assert all(name in str(err.value) for name in ("BATCHSIZE", "LR", "MAX_STEPS"))


def test_system_from_config_path():
    assert system_from_config_path("configs/bert/config_MI300X_1x8x48.sh") == "MI300X_1x8x48"
    with pytest.raises(ConfigError):
        system_from_config_path("mi300x.sh")


@pytest.mark.parametrize(
    "config", sorted((ROOT / "configs" / "bert").glob("config_*.sh")), ids=lambda p: p.name
)
def test_shipped_configs_parse(config):
    """Every shipped config sources cleanly, names its system after its file, and is a valid BertConfig."""
    out = subprocess.run(
        ["bash", "-c", f". {config} && env"],
        env={"PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert env["DGXSYSTEM"] == config.stem.removeprefix("config_")
    assert env["BENCHMARK"] == "bert"
    names = subprocess.run(
        ["bash", "-c", f". {config} && compgen -e"],
        env={"PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.split()
    cfg = BertConfig.from_env(
        {"DATADIR": "/data", **env}, config_vars=[n for n in names if n not in ("PATH", "PWD", "SHLVL", "_")]
    )
    if "MI3" in config.name:  # AMD's published values
        assert (cfg.lr, cfg.max_steps, cfg.beta1, cfg.beta2) == (0.00096, 4000, 0.60466, 0.99437)
        assert cfg.eval_iter_samples == 290_000 and cfg.global_batch_size(8) == 768


def test_the_effective_config_records_the_code_and_the_accelerator(tmp_path):
    """A run's <tag>.config.json says which commit ran and on what (the package's system description reads
    both): the commit, `+dirty` with uncommitted changes, and the GPU's name (`cpu` without one)."""
    write_effective_config(RunSettings(), tmp_path / "run_1.config.json", {"seed": 1})
    record = json.loads((tmp_path / "run_1.config.json").read_text())
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", record["git_commit"]), record["git_commit"]
    assert record["accelerator"] == "cpu" and record["seed"] == 1
    assert list(tmp_path.iterdir()) == [tmp_path / "run_1.config.json"]
