"""Every number a config accepts is range-checked, by name; typos near a known name are refused; the accepted
variables that the launchers read (MLPERF_RULESET) have an effect."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from training.bert.config import BertConfig
from training.common.config import ConfigError
from training.llama2_70b_lora.config import LoraConfig
from training.llama31_8b.config import LlamaPretrainConfig

BASES = {
    BertConfig: {"DATADIR": "/data", "BATCHSIZE": "48", "LR": "0.00096", "MAX_STEPS": "4000"},
    LlamaPretrainConfig: {
        "DATADIR": "/data",
        "GBS": "32",
        "MBS": "2",
        "MAX_LR": "8e-4",
        "WARMUP_STEPS": "128",
    },
    LoraConfig: {"DATADIR": "/data", "MINIBS": "2", "LR": "2e-3"},
}
CONFIGS = list(BASES)


def make(cls, **env):
    return cls.from_env({**BASES[cls], **env})


def numeric_fields(cls) -> list[dataclasses.Field]:
    hints = typing.get_type_hints(cls)
    return [
        f
        for f in dataclasses.fields(cls)
        if {int, float} & set(typing.get_args(hints[f.name]) or (hints[f.name],))
    ]


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_numeric_variable_has_a_range(cls):
    unbounded = [f.metadata["env"] for f in numeric_fields(cls) if not f.metadata.get("bounds")]
    assert unbounded == []


@pytest.mark.parametrize(
    "cls, env, needle",
    [
        (BertConfig, {"LR": "nan"}, "LR=nan must be a finite number > 0"),
        (BertConfig, {"LR": "-1e-3"}, "LR=-0.001 must be > 0"),
        (BertConfig, {"LR": "inf"}, "LR=inf must be a finite number > 0"),
        (BertConfig, {"OPT_LAMB_BETA_1": "1.0"}, "OPT_LAMB_BETA_1=1.0 must be in [0, 1)"),
        (BertConfig, {"OPT_LAMB_BETA_2": "-0.1"}, "OPT_LAMB_BETA_2=-0.1 must be in [0, 1)"),
        (BertConfig, {"WEIGHT_DECAY_RATE": "-0.01"}, "WEIGHT_DECAY_RATE=-0.01 must be >= 0"),
        (BertConfig, {"OPT_LAMB_EPSILON": "0"}, "OPT_LAMB_EPSILON=0.0 must be > 0"),
        (BertConfig, {"WARMUP_STEPS": "-5"}, "WARMUP_STEPS=-5 must be >= 0"),
        (BertConfig, {"WARMUP_PROPORTION": "1.5"}, "WARMUP_PROPORTION=1.5 must be in [0, 1]"),
        (BertConfig, {"START_WARMUP_STEP": "5"}, "START_WARMUP_STEP=5 must be in [-inf, 0]"),
        (BertConfig, {"MAX_GRAD_NORM": "0"}, "MAX_GRAD_NORM=0.0 must be > 0"),
        (BertConfig, {"INIT_LOSS_SCALE": "0"}, "INIT_LOSS_SCALE=0.0 must be > 0"),
        (BertConfig, {"EVAL_ITER_START_SAMPLES": "-1"}, "EVAL_ITER_START_SAMPLES=-1 must be >= 0"),
        (BertConfig, {"MAX_SEQ_LENGTH": "0"}, "MAX_SEQ_LENGTH=0 must be > 0"),
        (BertConfig, {"BATCHSIZE": "-2"}, "BATCHSIZE=-2 must be > 0"),
        (BertConfig, {"LOG_FREQ": "0"}, "LOG_FREQ=0 must be > 0"),
        (LlamaPretrainConfig, {"MAX_LR": "0"}, "MAX_LR=0.0 must be > 0"),
        (LlamaPretrainConfig, {"NUM_WORKERS": "-1"}, "NUM_WORKERS=-1 must be >= 0"),
        (LlamaPretrainConfig, {"HIDDEN_SIZE": "0"}, "HIDDEN_SIZE=0 must be > 0"),
        (LlamaPretrainConfig, {"TARGET": "nan"}, "TARGET=nan must be a finite number > 0"),
        (LoraConfig, {"LORA_DROPOUT": "1"}, "LORA_DROPOUT=1.0 must be in [0, 1)"),
        (LoraConfig, {"WEIGHT_DECAY": "-1"}, "WEIGHT_DECAY=-1.0 must be >= 0"),
        (LoraConfig, {"GRADIENT_CLIP_VAL": "inf"}, "GRADIENT_CLIP_VAL=inf must be a finite number > 0"),
        (LoraConfig, {"WARMUP_TRAIN_STEPS": "-1"}, "WARMUP_TRAIN_STEPS=-1 must be >= 0"),
    ],
)
def test_out_of_range_values_are_named(cls, env, needle):
    with pytest.raises(ConfigError) as err:
        make(cls, **env)
    assert needle in str(err.value)


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_a_typo_in_an_mlperf_name_is_refused_with_the_nearest(cls):
    with pytest.raises(ConfigError) as err:
        cls.from_env(BASES[cls], config_vars=["MLPERF_SUBMISION_ORG", "NCCL_DEBUG"])
    assert (
        "MLPERF_SUBMISION_ORG: not a variable of this benchmark (did you mean MLPERF_SUBMISSION_ORG?)"
        in str(err.value)
    )
    assert "NCCL_DEBUG" not in str(err.value)


def test_a_prefixed_name_close_to_a_known_one_is_refused():
    with pytest.raises(ConfigError, match=r"TORCH_COMPILE_MODE: .*did you mean COMPILE_MODE"):
        BertConfig.from_env(BASES[BertConfig], config_vars=["TORCH_COMPILE_MODE"])
    BertConfig.from_env(BASES[BertConfig], config_vars=["TORCH_BLAS_PREFER_HIPBLASLT", "NCCL_IB_HCA"])


@pytest.mark.parametrize(
    "cls, latest, earlier, absent",
    [
        (BertConfig, "5.0.0", "4.1.0", "5.1.0"),
        (LlamaPretrainConfig, "6.1.0", "5.1.0", "5.0.0"),
        (LoraConfig, "6.1.0", "4.0.0", "3.1.0"),
    ],
)
def test_mlperf_ruleset_is_one_of_the_benchmarks_rounds(cls, latest, earlier, absent):
    assert make(cls).effective_ruleset() == latest
    assert make(cls, MLPERF_RULESET=earlier).effective_ruleset() == earlier
    with pytest.raises(
        ConfigError, match=rf"MLPERF_RULESET={absent}: .* not {absent}; unset it for {latest}"
    ):
        make(cls, MLPERF_RULESET=absent)
