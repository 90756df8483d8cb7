"""The trainer as a process, on synthetic data: a NaN loss (here from a corrupt checkpoint) ends the run
`aborted` with a message naming it, and the MLLOG log is still complete."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.bert.synthetic import TINY
from tests.bert.test_model import to_hf
from training.bert.model import BertForPackedPretraining, BertShape
from training.common import outcome
from training.common.outcome import Outcome

REPO = Path(__file__).resolve().parents[2]


def run_train(datadir: Path, torchrun: bool = False, **env) -> subprocess.CompletedProcess:
    """The trainer on the CPU, as a process of its own or (`torchrun`) one worker of torchrun's."""
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1"] if torchrun else []
    base = {"DATADIR": str(datadir), "BATCHSIZE": "4", "LR": "0.002", "MAX_STEPS": "100", "LOG_FREQ": "2",
            "EVAL_ITER_START_SAMPLES": "40", "EVAL_ITER_SAMPLES": "40", "MAX_SAMPLES_TERMINATION": "80",
            "TARGET_MLM_ACCURACY": "0.5", "CPU_DEMO": "1", "PYTHONPATH": str(REPO)}  # fmt: skip
    return subprocess.run([sys.executable, *launch, "-m", "training.bert.train"],
                          env={**os.environ, **base, **env}, cwd=REPO, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def mllog(stdout: str) -> list[dict]:
    return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in stdout.splitlines() if ":::MLLOG " in line]


def test_nan_loss_ends_the_run_aborted(bert_data, tmp_path):
    shape = BertShape(**{k: v for k, v in TINY.items() if k != "hidden_act"})
    state = to_hf(BertForPackedPretraining(shape).state_dict(), shape.num_hidden_layers)
    state["bert.encoder.layer.0.output.dense.weight"][0, 0] = float("nan")
    torch.save(state, tmp_path / "corrupt.pt")
    proc = run_train(
        bert_data, INIT_CHECKPOINT=str(tmp_path / "corrupt.pt"), LOGDIR=str(tmp_path), RUN_TAG="b_1"
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "non-finite loss by step 2" in proc.stderr
    assert outcome.read(tmp_path / "b_1.log") == Outcome("diverged", "non-finite loss by step 2")
    events = mllog(proc.stdout)
    assert [e["metadata"]["status"] for e in events if e["key"] == "run_stop"] == ["aborted"]
    assert {"train_samples", "eval_samples", "block_stop"} <= {e["key"] for e in events}


def test_missing_data_is_a_named_error(tmp_path):
    proc = run_train(tmp_path / "nowhere", INIT_CHECKPOINT="none")
    assert proc.returncode == 2 and "nowhere" in proc.stderr, proc.stderr[-2000:]


def test_a_data_error_reaches_the_verdict_through_torchrun(bert_data, tmp_path):
    """torchrun exits 1 for any failed worker; the outcome file says what failed."""
    datadir = tmp_path / "data"
    shutil.copytree(bert_data, datadir)
    for shard in (datadir / "hdf5" / "packed_data").glob("part_*"):
        shard.write_bytes(b"not HDF5")
    proc = run_train(datadir, torchrun=True, INIT_CHECKPOINT="none", LOGDIR=str(tmp_path), RUN_TAG="b_1")
    assert proc.returncode == 1, proc.stderr[-2000:]
    found = outcome.read(tmp_path / "b_1.log")
    assert found.status == "data_error", found
    assert re.fullmatch(rf"{datadir}/hdf5/packed_data/part_0000\d: cannot read HDF5 \(.+\)", found.detail)
    assert found.describe().startswith(f"data error: {datadir}/hdf5/packed_data/part_")


def test_bf16_residual_where_precision_resolves_to_fp32_is_a_named_error(bert_data):
    proc = run_train(bert_data, INIT_CHECKPOINT="none", RESIDUAL_DTYPE="bf16")  # PRECISION=auto: fp32 on CPU
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "RESIDUAL_DTYPE=bf16 needs PRECISION bf16 or fp8; PRECISION=auto resolved to fp32" in proc.stderr


@pytest.mark.parametrize(
    "backend,residual,description", [("torchao", "fp32", "torchao float8"), ("auto", "bf16", "native FP8")]
)
def test_fp8_swaps_the_encoder_linears_and_trains(bert_data, backend, residual, description):
    if backend == "torchao":
        pytest.importorskip("torchao")
    proc = run_train(
        bert_data, INIT_CHECKPOINT="none", PRECISION="fp8", FP8_BACKEND=backend, RESIDUAL_DTYPE=residual
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: the tiny run may stop short of its target
    events = {e["key"]: e["value"] for e in mllog(proc.stdout)}
    assert events["backend_precision"] == "fp8" and events["backend_residual_dtype"] == residual
    swapped = f"{4 * TINY['num_hidden_layers']} linear layers"  # qkv, attn_out, ffn_in, ffn_out per layer
    assert events["backend_fp8"].startswith(description) and swapped in events["backend_fp8"]
    assert ("MLPs fused" in events["backend_fp8"]) == (description == "native FP8")
    assert "non-finite" not in proc.stderr and 0 <= events["eval_accuracy"] <= 1
