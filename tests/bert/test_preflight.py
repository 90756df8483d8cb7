"""training.bert.preflight.check: the demo data passes; FP8 without a backend is named (as for the Llamas)."""

from __future__ import annotations

from tests.llama.helpers import no_fp8_backend
from training.bert.preflight import check

# an evaluation every 50 steps of 8 samples (the preflight refuses a run that would stop before its first)
ENV = {
    "BATCHSIZE": "4",
    "LR": "0.002",
    "MAX_STEPS": "100",
    "CPU_DEMO": "1",
    "INIT_CHECKPOINT": "none",
    "EVAL_ITER_START_SAMPLES": "400",
    "EVAL_ITER_SAMPLES": "400",
}


def test_fp8_without_a_backend_is_named(bert_data, monkeypatch):
    env = {**ENV, "DATADIR": str(bert_data)}
    assert check(env) == []
    no_fp8_backend(monkeypatch)
    (problem,) = check({**env, "PRECISION": "fp8"})
    assert "FP8 needs Transformer Engine or torchao; neither is importable" in problem
