"""PRECISION=fp16: autocast to float16 with a dynamic loss scale that starts at INIT_LOSS_SCALE, halves and
skips the step on an overflow, so no inf reaches the weights (on the CPU here, as on a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.bert.synthetic import TINY
from tests.bert.test_golden import packed_rows
from tests.bert.test_train import mllog, run_train
from training.bert import build, data, step
from training.bert.model import BertShape
from training.common.dist import DistInfo

CPU = DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))


def tiny_setup(init_loss_scale: float):
    """The tiny model in fp16 as the trainer builds it, and two batches."""
    torch.manual_seed(0)
    shape = BertShape(
        **{k: v for k, v in TINY.items() if k != "hidden_act"},
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    spec = build.RunSpec(shape, attention="sdpa", precision="fp16", init_loss_scale=init_loss_scale)
    model, train_step, _ = build.build_run(spec, CPU)
    rows = packed_rows(np.random.default_rng(3), 8)
    batches = [data.collate(rows[i : i + 4], 512) for i in (0, 4)]
    return model, train_step, batches


def weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_fp16_steps_scale_the_loss_and_skip_an_overflow():
    model, train_step, batches = tiny_setup(2.0**21)  # too large: the first steps overflow
    scaler = train_step.scaler
    before = weights(model)
    train_step(iter(batches))
    assert scaler.get_scale() == 2.0**20  # halved, and the step skipped
    assert all(torch.equal(a, b) for a, b in zip(before, weights(model)))
    for _ in range(8):  # the scale comes down until a step's gradients fit in float16
        loss = train_step(iter(batches))
        if any(not torch.equal(a, b) for a, b in zip(before, weights(model))):
            break
    assert torch.isfinite(loss) and scaler.get_scale() < 2.0**20
    assert any(not torch.equal(a, b) for a, b in zip(before, weights(model)))
    assert all(torch.isfinite(p).all() for p in weights(model))


def test_no_loss_scale_outside_fp16():
    assert not step.loss_scaler("bf16", 1024.0, CPU.device).is_enabled()
    assert step.loss_scaler("fp16", 1024.0, CPU.device).get_scale() == 1024.0


@pytest.mark.slow
def test_the_trainer_runs_fp16_with_init_loss_scale(bert_data):
    proc = run_train(bert_data, INIT_CHECKPOINT="none", PRECISION="fp16", INIT_LOSS_SCALE="4096")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: the tiny run may stop short of its target
    events = {e["key"]: e["value"] for e in mllog(proc.stdout)}
    assert events["backend_precision"] == "fp16" and events["backend_loss_scale"] == "dynamic from 4096.0"
    assert "non-finite" not in proc.stderr and 0 <= events["eval_accuracy"] <= 1
