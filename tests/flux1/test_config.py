"""Flux.1's configs: each of configs/flux1/ passes the config stage; AMD's published names are each honored
or named as not applicable (none a typo); the arithmetic of a config is checked; the preflight opens the
data with the trainer's reader."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from training.common.config import ConfigError
from training.flux1.config import FluxConfig
from training.flux1.preflight import check

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "flux1"


def sourced(config: Path) -> tuple[dict[str, str], list[str]]:
    """The environment after sourcing `config` in an empty shell, and the names it exported."""
    out = subprocess.run(
        ["env", "-i", "bash", "-c", f'source "{config}"; env -0; echo; compgen -e'],
        capture_output=True,
        check=True,
    )
    env_part, names = out.stdout.rsplit(b"\0\n", 1)
    env = dict(item.split("=", 1) for item in env_part.decode().split("\0") if "=" in item)
    exported = [n for n in names.decode().split() if n not in ("PWD", "SHLVL", "_", "OLDPWD")]
    return env, exported


@pytest.mark.parametrize("config", sorted(CONFIGS.glob("config_*.sh")), ids=lambda p: p.stem)
def test_every_config_passes_the_config_stage(config, tmp_path):
    env, names = sourced(config)
    cfg = FluxConfig.from_env({**env, "DATADIR": str(tmp_path)}, names)
    assert cfg.scale_problems() == [] and cfg.schedule().evaluates()
    assert cfg.gbs == cfg.grad_accum(cfg.world_size()) * cfg.micro_batch_size * cfg.world_size()


def test_amds_names_are_honored_or_named_and_its_fp8_is_said_to_run_in_bf16(tmp_path):
    env, names = sourced(CONFIGS / "config_MI325X_8x8x32.sh")
    extra = {
        "VAL_CHECK_INTERVAL": "128",
        "LOG_EVERY_N_STEPS": "10",
        "MLLOG_TENSOR_PARALLELISM": "1",
        "USE_DISTRIBUTED_OPTIMIZER": "True",
        "HOLD_STEPS": "10000000000000",
    }  # conf/flux1_schnell.yaml's
    cfg = FluxConfig.from_env({**env, **extra, "DATADIR": str(tmp_path)}, [*names, *extra])
    assert (cfg.gbs, cfg.micro_batch_size, cfg.lr, cfg.warmup_steps) == (2048, 32, 2.5e-4, 0)
    assert cfg.eval_every == 128 * 2048 and cfg.log_freq == 10 and cfg.compile
    na = cfg.vendor_names["not_applicable"]
    assert {
        "COMPILE_DIT_STRATEGY",
        "NVTE_FUSED_ATTN_CK",
        "CUDA_GRAPH_IMPL",
        "USE_DISTRIBUTED_OPTIMIZER",
    } <= set(na)
    assert cfg.requested_precision() == "fp8" and cfg.substitutions(64) == []  # AMD's FP8, delayed scaling
    with pytest.raises(ConfigError, match="MLLOG_TENSOR_PARALLELISM=2: tensor parallelism is not built"):
        FluxConfig.from_env({**env, "MLLOG_TENSOR_PARALLELISM": "2", "DATADIR": "/d"})
    with pytest.raises(ConfigError, match="COMPILE_DIT_STRATEGI: not a variable of this benchmark"):
        FluxConfig.from_env(
            {**env, "COMPILE_DIT_STRATEGI": "stack", "DATADIR": "/d"}, ["COMPILE_DIT_STRATEGI"]
        )


def test_the_evaluation_interval_is_the_rules(tmp_path):
    env, _ = sourced(CONFIGS / "config_H100_1x8x16.sh")
    for gbs, every in ((512, 262_144), (1536, 262_656), (4096, 262_144)):  # ceil(262,144 / GBS) x GBS
        cfg = FluxConfig.from_env(
            {
                **env,
                "BATCHSIZE": str(gbs),
                "MBS": "16" if gbs % 128 == 0 else "64",
                "DGXSYSTEM": "x",
                "DATADIR": "/d",
            }
        )
        assert cfg.evaluation_frequency() == every
    with pytest.raises(ConfigError, match="BATCHSIZE=500 is not a multiple of MBS=16 x 8 ranks"):
        FluxConfig.from_env({**env, "BATCHSIZE": "500", "DGXSYSTEM": "x", "DATADIR": "/d"}).grad_accum(8)


def test_the_preflight_opens_the_data_and_names_what_is_missing(sample_data, tmp_path):
    env, names = sourced(CONFIGS / "config_CPU_1x1x16.sh")
    assert check({**env, "DATADIR": str(sample_data), "CONFIG_VARS": " ".join(names)}) == []
    problems = check({**env, "DATADIR": str(tmp_path), "CONFIG_VARS": " ".join(names)})
    assert f"train data {tmp_path}/cc12m_preprocessed does not exist" in problems
