"""The Llama config: errors name the variable, NVIDIA's names are aliases, the parallel arithmetic holds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from training.common.config import ConfigError
from training.llama31_8b.config import LlamaPretrainConfig

ROOT = Path(__file__).resolve().parents[2]
BASE = {"DATADIR": "/data", "GBS": "32", "MBS": "2", "MAX_LR": "8e-4", "WARMUP_STEPS": "128"}


def make(**env):
    merged = {**BASE, **env}
    return LlamaPretrainConfig.from_env({k: v for k, v in merged.items() if v is not None})


def test_defaults_are_the_mlperf_values():
    cfg = make()
    assert (cfg.seq_length, cfg.max_steps, cfg.eval_samples, cfg.eval_every, cfg.target) == (
        8192,
        1_200_000,
        1024,
        12288,
        3.3,
    )
    assert cfg.end_lr() == pytest.approx(8e-5) and cfg.decay_steps() == 1_199_872
    assert cfg.eval_steps() == (384, 384) and cfg.deviations() == []
    assert make(START_EVAL_AT="24576").eval_steps() == (768, 384)


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"GBS": None}, "GBS: required"),
        ({"MAX_LR": "fast"}, "MAX_LR='fast'"),
        ({"GBS": "3.5"}, "whole number"),
        ({"WARMUP_STEPS": "-1"}, "WARMUP_STEPS=-1"),
        ({"PRECISION": "fp16"}, "PRECISION='fp16'"),
        ({"MODEL_SIZE": "7b"}, "MODEL_SIZE='7b'"),
        (
            {"PP": "2", "FP8": "1"},
            "PIPELINE_MODEL_PARALLEL_SIZE>1 with FP8 with FP8_BACKEND=auto (torchao runs)",
        ),
        (
            {"PP": "2", "PRECISION": "fp8", "FP8_BACKEND": "native"},
            "FP8 with FP8_BACKEND=native (torchao runs)",
        ),
        ({"PP": "3"}, "32 layers do not split into PIPELINE_MODEL_PARALLEL_SIZE=3 equal stages"),
        ({"CP": "2", "COMPILE": "1"}, "CONTEXT_PARALLEL_SIZE>1 with COMPILE=1 is not implemented"),
        ({"CP": "3"}, "SEQ_LENGTH=8192 is not a multiple of 2 x CONTEXT_PARALLEL"),
        ({"TP": "3"}, "NUM_QUERY_GROUPS=8 is not divisible by TENSOR_MODEL_PARALLEL_SIZE=3"),
        (
            {"FP8": "1", "TP": "2"},
            "FP8 with TENSOR_MODEL_PARALLEL_SIZE>1 runs with FP8_BACKEND=native only",
        ),
        ({"FP8": "1", "PRECISION": "fp32"}, "FP8=1 (bf16 with FP8 matmuls) contradicts PRECISION=fp32"),
        ({"FP8": "0", "PRECISION": "fp8"}, "FP8=0 contradicts PRECISION=fp8"),
        ({"FP8_MLP_ACTIVATIONS": "1"}, "FP8_MLP_ACTIVATIONS=1 needs PRECISION=fp8 with FP8_BACKEND=native"),
        (
            {"FP8_MLP_ACTIVATIONS": "1", "FP8": "1", "FP8_BACKEND": "torchao"},
            "FP8_MLP_ACTIVATIONS=1 needs PRECISION=fp8 with FP8_BACKEND=native",
        ),
        ({"FP8_DPA": "1"}, "FP8_DPA=1 (FP8 attention) needs PRECISION=fp8"),
        ({"FP8_DPA": "True", "FP8": "1", "ATTENTION": "flash4"}, "ATTENTION=flash4 contradicts it"),
        ({"MAX_LR": "nan"}, "MAX_LR=nan must be a finite number > 0"),
        ({"TARGET": "inf"}, "TARGET=inf must be a finite number > 0"),
        ({"LR": "4e-4"}, "MAX_LR='8e-4', LR='4e-4': the same setting given twice"),
    ],
)
def test_errors_name_the_variable(env, needle):
    with pytest.raises(ConfigError) as err:
        make(**env)
    assert needle in str(err.value)


def test_fp8_is_allowed_with_tensor_parallelism_native_and_pipelines_torchao():
    assert make(FP8="1", TP="2", FP8_BACKEND="native").tp == 2
    assert make(FP8="1", PP="2", FP8_BACKEND="torchao").pp == 2


def test_precision_fp8_and_nvidias_fp8_switch_are_the_same_setting():
    """One vocabulary for every benchmark: PRECISION=fp8; FP8=1 (NVIDIA's and AMD's configs) means the same,
    with PRECISION bf16 or auto."""
    assert make(PRECISION="fp8").fp8 and make(FP8="1").fp8 and make(FP8="1", PRECISION="bf16").fp8
    assert not make().fp8 and not make(FP8="0").fp8
    assert make(FP8="1").requested_precision() == "fp8"


def test_nvidia_names_are_aliases_and_typos_are_caught():
    cfg = make(
        MAX_LR=None,
        LR="4e-4",
        MBS=None,
        MICRO_BATCH_SIZE="1",
        TENSOR_MODEL_PARALLEL="2",
        TARGET_LOG_PPL="3.3",
    )
    assert (cfg.max_lr, cfg.micro_batch_size, cfg.tp) == (4e-4, 1, 2)
    with pytest.raises(
        ConfigError, match="WARMUP_STEP: not a variable of this benchmark .did you mean WARMUP_STEPS"
    ):
        LlamaPretrainConfig.from_env(BASE, ["GBS", "WARMUP_STEP", "LR", "NCCL_DEBUG"])


def test_tensor_with_context_parallelism_runs_as_context_parallelism_over_both_and_says_so():
    """NVIDIA's 8B at 128 nodes (TP 2 x CP 4 on 512 GPUs, GBS 64 = MINIBS 1 x 512 / 8): CP 8 here, the same
    data-parallel size and so global batch; said as a substitution, which a plain layout has none of."""
    cfg = make(TP="2", CP="4", GBS="64", MBS="1", DGXNNODES="128", DGXNGPU="4")
    assert cfg.model_layout() == (1, 1, 8)
    par = cfg.parallelism(512)
    assert (par.tp, par.cp, par.dp, par.grad_accum) == (1, 8, 64, 1)
    (said,) = cfg.substitutions(512)
    assert "TENSOR_MODEL_PARALLEL_SIZE=2 with CONTEXT_PARALLEL_SIZE=4 runs as CONTEXT_PARALLEL_SIZE=8" in said
    assert make(CP="2").substitutions(8) == [] and make(TP="2").model_layout() == (2, 1, 1)


def test_parallel_arithmetic():
    par = make().parallelism(8)
    assert (par.dp, par.grad_accum) == (8, 2)  # AMD: GBS 32 = MBS 2 x DP 8 x 2 accumulation steps
    par = make(GBS="16", MBS="1", TP="2").parallelism(8)
    assert (par.tp, par.dp, par.grad_accum) == (2, 4, 4)
    with pytest.raises(ConfigError, match="GBS=32 is not a multiple of MBS x data-parallel size = 2 x 32"):
        make().parallelism(32)
    with pytest.raises(ConfigError, match="2 x 1 x 1 = 2 does not divide the world size 3"):
        make(TP="2").parallelism(3)
    # the preflight's form: problems, each named, the system's name read too
    assert make(DGXSYSTEM="MI355X_1x8x1", DGXNGPU="8").scale_problems(8) == []
    assert make(DGXSYSTEM="MI355X_1x8x1", DGXNGPU="8").scale_problems(32) == [
        "DGXNNODES=1 x DGXNGPU=8 = 8 ranks, but the launcher starts 32",
        "GBS=32 is not a multiple of MBS x data-parallel size = 2 x 32 (world 32 / TP x PP x CP 1)",
    ]


@pytest.mark.parametrize(
    "config", sorted((ROOT / "configs" / "llama31_8b").glob("config_*.sh")), ids=lambda p: p.name
)
def test_shipped_configs_parse_and_fit_their_node(config):
    script = f'set -a; source "{config}"; env -0'
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout.decode()
    env = dict(line.split("=", 1) for line in out.split("\0") if "=" in line)
    names = subprocess.run(
        ["bash", "-c", f"env -i bash -c '. \"{config}\" && compgen -e'"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    names = [
        n for n in names if n not in ("PWD", "SHLVL", "_", "OLDPWD")
    ]  # bash's own, as the runner drops them
    cfg = LlamaPretrainConfig.from_env({**env, "DATADIR": "/data"}, names)
    par = cfg.parallelism(cfg.world_size())
    assert cfg.scale_problems(cfg.world_size()) == []
    assert env["BENCHMARK"] == "llama31_8b" and env["DGXSYSTEM"] == config.stem.removeprefix("config_")
    assert cfg.gbs == cfg.micro_batch_size * par.dp * par.grad_accum
    if cfg.is_cpu_demo:
        assert cfg.target != 3.3 and cfg.deviations()
    else:
        assert cfg.deviations() == [] and cfg.fp8


def test_fp8_dpa_asks_the_run_for_fp8_attention():
    assert make(FP8_DPA="True", FP8="1").run_spec().fp8_attention
    assert not make(FP8="1").run_spec().fp8_attention
