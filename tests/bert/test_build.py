"""The config's variables reach the run `build_run` builds: the config translates into a RunSpec
(`BertConfig.run_spec`), and the build makes what the spec asks for."""

from __future__ import annotations

import argparse

import pytest
import torch

from tests.bert.synthetic import TINY
from training.bert import build
from training.bert.config import BertConfig
from training.bert.model import BertShape
from training.common.dist import DistInfo

SHAPE = BertShape(**{k: v for k, v in TINY.items() if k != "hidden_act"})
CPU = DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))


def test_the_config_translates_into_a_run_spec():
    env = {
        "DATADIR": "/data",
        "BATCHSIZE": "4",
        "LR": "0.002",
        "MAX_STEPS": "10",
        "OPT_LAMB_BETA_1": "0.6",
        "OPT_LAMB_BETA_2": "0.85",
        "WEIGHT_DECAY_RATE": "0.1",
        "OPT_LAMB_EPSILON": "1e-8",
        "MAX_GRAD_NORM": "2",
        "INIT_CHECKPOINT": "none",
        "ATTENTION": "sdpa",
        "FP8": "1",
        "FP8_BACKEND": "native",
        "FP8_FAST_ACCUM": "1",
        "FP8_AMAX_HISTORY": "8",
        "RESIDUAL_DTYPE": "bf16",
        "COMPILE": "1",
        "COMPILE_MODE": "reduce-overhead",
        "GRADIENT_STEPS": "3",
        "INIT_LOSS_SCALE": "8",
    }
    spec = BertConfig.from_env(env).run_spec(SHAPE)
    assert spec.shape == SHAPE and spec.checkpoint is None and spec.attention == "sdpa"
    assert spec.optimizer == build.LambSettings(
        lr=0.002, betas=(0.6, 0.85), eps=1e-8, weight_decay=0.1, max_grad_norm=2.0
    )
    assert spec.precision == "fp8" and spec.residual_dtype == "bf16"
    assert spec.fp8 == build.fp8_settings("native", fast_accum=True, amax_history=8)
    assert (spec.compile, spec.compile_mode, spec.gradient_steps, spec.init_loss_scale) == (
        True,
        "reduce-overhead",
        3,
        8.0,
    )


def test_build_run_makes_what_the_spec_asks_for():
    spec = build.RunSpec(
        SHAPE,
        build.LambSettings(lr=0.5, betas=(0.6, 0.85), max_grad_norm=2.0),
        attention="sdpa",
        precision="fp16",
        gradient_steps=3,
        init_loss_scale=8.0,
    )
    model, step, chosen = build.build_run(spec, CPU)
    assert step.model is model and step.gradient_steps == 3 and step.scaler.get_scale() == 8.0
    assert step.optimizer.defaults["betas"] == (0.6, 0.85) and step.optimizer.defaults["max_grad_norm"] == 2.0
    assert [g["weight_decay"] for g in step.optimizer.param_groups] == [0.01, 0.0]
    logged = ["attention", "precision", "fp8", "optimizer", "data_parallel", "residual_dtype", "compile"]
    assert list(chosen) == [*logged, "loss_scale", "platform"]  # the order the run logs them in
    built = [chosen[k] for k in logged if k != "fp8"]
    assert built == ["sdpa", "fp16", "lamb_foreach", "none", "fp32", "none"]
    assert chosen["loss_scale"] == "dynamic from 8.0"


def test_bench_variants_are_the_config_plus_overrides():
    from perf import bench_bert
    from perf.lib import overrides

    ap = argparse.ArgumentParser()
    overrides.add_arguments(ap, bench_bert.DEFAULT_VARIANTS, bench_bert.REFERENCE)
    args = ap.parse_args(
        [
            "--config",
            "configs/bert/config_H100_1x8x48.sh",
            "--variant",
            "h100:",
            "--variant",
            "fastaccum: FP8_FAST_ACCUM=1",
        ]
    )
    specs = bench_bert.variant_specs(overrides.from_args(args, ["hf:"]), args.config, 48, SHAPE)
    assert list(specs) == ["eager", "h100", "fastaccum"]  # the reference first; the peer is not ours
    h100 = specs["h100"]  # the config's mode, at the bench's fixed rate
    assert (h100.compile, h100.compile_mode, h100.precision, h100.residual_dtype) == (
        True,
        "reduce-overhead",
        "fp8",
        "bf16",
    )
    assert h100.optimizer == build.LambSettings(1e-4, (0.60466, 0.85437), weight_decay=0.1)
    assert h100.fp8.backend == "native" and not h100.fp8.fast_accum and specs["fastaccum"].fp8.fast_accum
    eager = specs["eager"]  # the reference: eager bf16, whatever the config
    assert (eager.compile, eager.precision, eager.residual_dtype) == (False, "bf16", "fp32")
    with pytest.raises(overrides.OverrideError, match="takes no settings"):
        bench_bert.variant_specs(overrides.from_args(args, ["hf: COMPILE=1"]), None, 48, SHAPE)


def test_curve_parity_builds_bert_from_its_config():
    """`perf/curve_parity.py bert`: ours is BERT's config plus the variant's overrides, built by `build_run`
    from the peer's weights; a misspelt setting stops the call before anything trains, naming the nearest."""
    from perf import curve_parity
    from perf.lib import parity

    args = argparse.Namespace(tiny=True, steps=2, bert_variant=["eager: ATTENTION=sdpa PRECISION=bf16"])
    part = curve_parity.part_bert(args, torch.device("cpu"))
    assert part["settings"] == {"hf-bf16": {}, "eager": {"ATTENTION": "sdpa", "PRECISION": "bf16"}}
    ours, peer = part["curves"]["eager"], part["curves"]["hf-bf16"]
    # the same weights and batch in bf16 autocast: the first losses part by no more than the bf16 tolerance
    assert abs(ours[0] - peer[0]) <= parity.TOLERANCE["bf16"] * abs(peer[0])
    args.bert_variant = ["typo: ATTENTON=sdpa"]
    with pytest.raises(SystemExit, match="ATTENTION"):
        curve_parity.part_bert(args, torch.device("cpu"))
