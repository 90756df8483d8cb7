"""The vendor vocabulary (training/common/vendor_vars.py): AMD's and NVIDIA's names honored with their units
converted, the others recorded as not applicable with their reason, a real typo still refused."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from tests.launch.helpers import REPO
from training.bert.config import BertConfig
from training.common import vendor_vars
from training.common.config import ConfigError, write_effective_config
from training.llama2_70b_lora.config import LoraConfig
from training.llama31_8b.config import LlamaPretrainConfig

CLASSES = {"bert": BertConfig, "llama2_70b_lora": LoraConfig, "llama31_8b": LlamaPretrainConfig}
BERT = {"DATADIR": "/data", "BATCHSIZE": "48", "LR": "0.00096", "MAX_STEPS": "3680"}
LORA = {"DATADIR": "/data", "MINIBS": "1", "LR": "4e-4", "DGXNGPU": "8"}
LLAMA = {"DATADIR": "/data", "MBS": "1", "LR": "8e-4", "WARMUP_STEPS": "96"}


def ours(cls) -> set[str]:
    fields = [f for f in dataclasses.fields(cls) if "env" in f.metadata]
    return {f.metadata["env"] for f in fields} | {a for f in fields for a in f.metadata.get("aliases", ())}


@pytest.mark.parametrize("bench", sorted(CLASSES))
def test_a_row_never_shadows_our_own_variable_and_is_one_a_name(bench):
    names = [r.name for r in vendor_vars.ROWS if bench in r.benchmarks]
    assert len(names) == len(set(names))
    assert set(names) & ours(CLASSES[bench]) == set()
    kinds = {vendor_vars.HONORED, vendor_vars.LIBRARY, vendor_vars.NOT_APPLICABLE}
    for row in vendor_vars.ROWS:
        assert row.kind in kinds and row.why and (row.to is not None) == (row.kind == vendor_vars.HONORED)


def test_amds_8b_scale_names_are_honored_and_recorded():
    cfg = LlamaPretrainConfig.from_env(
        {**LLAMA, "GBS": "32", "NNODES": "1", "GPUS_PER_NODE": "8"},
        ["NNODES", "GPUS_PER_NODE", "STEP_TIME_ATOL"],
    )
    assert (cfg.num_nodes, cfg.gpus_per_node) == (1, 8)
    assert cfg.vendor_names["honored"] == {"NNODES=1": "DGXNNODES=1", "GPUS_PER_NODE=8": "DGXNGPU=8"}
    assert "hang guard" in cfg.vendor_names["not_applicable"]["STEP_TIME_ATOL"]


def test_nvidias_8b_batch_and_evaluation_convert_to_ours():
    """NVIDIA's 8B: MINIBS per data-parallel rank (72 GPUs / CP 2 = 36 ranks: GBS 36), VAL_CHECK_INTERVAL in
    steps (342 steps x 36 = 12,312 samples; their log's first eval_start is at samples_count 12,312)."""
    env = {
        **LLAMA,
        "DGXNNODES": "18",
        "DGXNGPU": "4",
        "CONTEXT_PARALLEL": "2",
        "MINIBS": "1",
        "VAL_CHECK_INTERVAL": "342",
        "OPT_LR_DECAY_STEPS": "1200000",
        "COMPILE": "0",
    }
    cfg = LlamaPretrainConfig.from_env(env, list(env))
    assert (cfg.gbs, cfg.eval_every, cfg.eval_steps(), cfg.max_steps) == (36, 12312, (342, 342), 1200000)
    with pytest.raises(ConfigError, match=r"MINIBS=1 .* gives GBS=36, but GBS=32 is set too"):
        LlamaPretrainConfig.from_env({**env, "GBS": "32"})


def test_recompute_names_map_to_ours_and_what_is_not_implemented_is_refused_by_name():
    cfg = LoraConfig.from_env({**LORA, "ACG": "full", "ACM": "block", "ACL": "21"})
    assert cfg.activation_checkpointing and cfg.checkpoint_layers == 21
    with pytest.raises(ConfigError, match="ACG='selective': only 'full'"):
        LoraConfig.from_env({**LORA, "ACG": "selective"})
    with pytest.raises(ConfigError, match="ACM=uniform with ACL=4"):
        LoraConfig.from_env({**LORA, "ACG": "full", "ACM": "uniform", "ACL": "4"})


def test_fp4_trains_its_recipe():
    """NVIDIA's _fp4 configs (FP4=True FP8=False, FP4_RECIPE=nvfp4) train their 4-bit recipe
    (`training.fp4`), FP8 only after healing, and say that the GEMMs are emulated except on sm100; FP4 is
    refused beside a precision that contradicts it."""
    cfg = LoraConfig.from_env({**LORA, "FP4": "True", "FP8": "False", "FP4_RECIPE": "nvfp4"})
    assert cfg.requested_precision() == "fp8" and cfg.fp4_settings().recipe.format == "nvfp4"
    (said,) = cfg.substitutions(8)
    assert said.startswith("FP4=True: the NVFP4 GEMMs run emulated") and "not speed" in said
    assert LlamaPretrainConfig.from_env({**LLAMA, "GBS": "32", "FP4": "1"}).substitutions(8) == [said]
    with pytest.raises(ConfigError, match="FP4=True .* contradicts PRECISION=fp32"):
        LoraConfig.from_env({**LORA, "FP4": "True", "PRECISION": "fp32"})
    off = LoraConfig.from_env({**LORA, "FP4": "False", "FP8": "False"})
    assert not off.fp8 and off.fp4_settings() is None


def test_warmup_recipe_sets_the_precision_of_warmup_passes_that_run():
    """WARMUP_RECIPE=fp8_hybrid puts the synthetic warm-up in FP8 (AMD's 8B, SYNTH_WARMUP_STEPS=20): the
    record (and the log's FP8 backend line) says so only where warm-up passes run."""
    amd = {**LLAMA, "GBS": "32", "FP4": "true", "FP4_RECIPE": "mxfp4", "WARMUP_RECIPE": "fp8_hybrid"}
    assert LlamaPretrainConfig.from_env({**amd, "SYNTHETIC_WARMUP_STEPS": "20"}).fp4_settings().warmup_in_fp8
    assert not LlamaPretrainConfig.from_env(amd).fp4_settings().warmup_in_fp8  # no warm-up by default
    lora = {**LORA, "FP4": "True", "WARMUP_RECIPE": "fp8_hybrid"}
    assert LoraConfig.from_env(lora).fp4_settings().warmup_in_fp8  # WARMUP=True: 5 passes
    assert not LoraConfig.from_env({**lora, "WARMUP": "False"}).fp4_settings().warmup_in_fp8


def test_not_applicable_names_are_recorded_and_a_typo_is_still_refused(tmp_path):
    env = {**BERT, "EXTRA_PARAMS": "--use_cuda_graph", "USE_DDP": "1", "WALLTIME_MINUTES": "8"}
    cfg = BertConfig.from_env(env, ["BATCHSIZE", "EXTRA_PARAMS", "USE_DDP", "WALLTIME_MINUTES"])
    assert sorted(cfg.vendor_names["not_applicable"]) == ["EXTRA_PARAMS", "USE_DDP", "WALLTIME_MINUTES"]
    lines = vendor_vars.describe(cfg.vendor_names)
    assert len(lines) == 1 and "EXTRA_PARAMS: NVIDIA's BERT trainer flags" in lines[0]
    write_effective_config(cfg, tmp_path / "run.config.json")
    record = json.loads((tmp_path / "run.config.json").read_text())
    assert record["vendor_names"]["not_applicable"]["USE_DDP"].startswith("NVIDIA's BERT switch")
    assert "vendor_names" not in record["config"]
    with pytest.raises(
        ConfigError, match="EXTRA_PARAM: not a variable of this benchmark .did you mean EXTRA_P"
    ):
        BertConfig.from_env(BERT, ["EXTRA_PARAM"])
    with pytest.raises(ConfigError, match="EXTRA_PARAMS: not a variable of this benchmark"):
        LoraConfig.from_env(LORA, ["EXTRA_PARAMS"])  # NVIDIA's BERT flags in a LoRA config: a mistake


def test_amds_8b_fp8_params_trains_fp8_as_its_trainer_does():
    """AMD's 8B config says nothing of FP8 but FP8_PARAMS=1: its train.py trains FP8 (HYBRID) always, so the
    file sourced unchanged trains FP8 here, not bf16; a PRECISION that says otherwise is refused by name."""
    cfg = LlamaPretrainConfig.from_env({**LLAMA, "GBS": "32", "FP8_PARAMS": "1"}, ["FP8_PARAMS"])
    assert cfg.requested_precision() == "fp8" and cfg.fp8_param_gather
    assert cfg.vendor_names["honored"] == {"FP8_PARAMS=1": "PRECISION=fp8, FP8_PARAM_GATHER=1"}
    with pytest.raises(ConfigError, match=r"FP8_PARAMS=1 .* gives PRECISION=fp8, but PRECISION=bf16 is set"):
        LlamaPretrainConfig.from_env({**LLAMA, "GBS": "32", "FP8_PARAMS": "1", "PRECISION": "bf16"})
    off = LlamaPretrainConfig.from_env({**LLAMA, "GBS": "32", "FP8_PARAMS": "0"})
    assert off.requested_precision() == "auto" and not off.fp8_param_gather


def test_a_vendor_name_and_ours_given_with_one_value_agree():
    cfg = LlamaPretrainConfig.from_env({**LLAMA, "GBS": "32", "FP8_PARAMS": "1", "FP8_PARAM_GATHER": "True"})
    assert cfg.fp8_param_gather
    with pytest.raises(ConfigError, match="gives DGXNNODES=2, but DGXNNODES=1 is set too"):
        LlamaPretrainConfig.from_env({**LLAMA, "GBS": "32", "NNODES": "2", "DGXNNODES": "1"})


@pytest.mark.parametrize(
    "names, bench",
    [
        ("BATCHSIZE LR MAX_STEPS OPT_LAMB_BETA_1 EXTRA_PARAMS DGXNNODES", "bert"),
        ("MINIBS LR MAX_STEPS SKIP_EVALS LORA_A2A FP8_AMAX_HISTORY TP", "llama2_70b_lora"),
        ("NNODES GPUS_PER_NODE SIZE GBS MBS MAX_LR WARMUP_STEPS EVAL_EVERY", "llama31_8b"),
        ("MINIBS TENSOR_MODEL_PARALLEL MODEL_SIZE TARGET_LOG_PPL VAL_SAMPLES LR", "llama31_8b"),
        ("BATCHSIZE LEARNING_RATE MBS WARMUP_STEPS COMPILE_DIT COMPILE_DIT_STRATEGY", "flux1"),
    ],
)
def test_the_benchmark_of_a_config_that_does_not_say_it_is_told_by_its_names(names, bench):
    assert vendor_vars.guess_benchmark(names.split())[0] == bench


def launcher(env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "training.common.vendor_vars", "launcher"]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)


def test_a_config_whose_benchmark_cannot_be_told_is_named_with_what_to_do():
    assert vendor_vars.guess_benchmark(["LR", "MAX_STEPS"]) == (
        None,
        "none of its names is one benchmark's own",
    )
    bench, why = vendor_vars.guess_benchmark(["OPT_LAMB_BETA_1", "LORA_DIM"])
    assert bench is None and "several benchmarks" in why
    env = {"PATH": os.environ["PATH"], "CONFIG_VARS": "LR MAX_STEPS NNODES", "NNODES": "2"}
    done = launcher(env)
    assert (
        done.returncode == 2 and "export BENCHMARK=bert | llama2_70b_lora | llama31_8b | flux1" in done.stderr
    )
    env["CONFIG_VARS"] += " SIZE GBS"
    done = launcher(env)
    assert done.returncode == 0 and done.stdout.split() == ["BENCHMARK=llama31_8b", "DGXNNODES=2"]


def test_amds_model_folder_is_read_for_the_8b_and_its_vocabulary_checked(tmp_path):
    """AMD's 8B requires MODEL (its tokenizer download, mounted at /model); here it is the folder whose
    config.json must give the vocabulary the model is built with."""
    env = {**LLAMA, "GBS": "32", "MODEL": str(tmp_path)}
    assert LlamaPretrainConfig.from_env(env).model_problems() == []
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 128256}))
    assert LlamaPretrainConfig.from_env(env).model_problems() == []
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 32000}))
    (problem,) = LlamaPretrainConfig.from_env(env).model_problems()
    assert "vocab_size 32000, the model here 128256" in problem
    (missing,) = LlamaPretrainConfig.from_env({**env, "MODEL": str(tmp_path / "none")}).model_problems()
    assert "no such folder" in missing
