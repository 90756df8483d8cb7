"""FSDP2 and DTensor tensor parallelism on CPU with gloo processes (DP 2, TP 2, and both on 4 processes):
the same losses and weights as one process training on the whole batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.llama import parallel_worker as worker
from training.fp8 import Fp8Settings, apply_fp8

HERE = Path(__file__).resolve().parent


def run_worker(tmp_path, dp: int, tp: int, accum: int, pp: int = 1, **env: str) -> Path:
    """`parallel_worker.py` under torchrun on dp x tp x pp CPU processes, `env` added to the environment;
    returns the path its rank 0 wrote (with PP, every rank writes that path + `.rank`)."""
    out = tmp_path / "result.pt"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={dp * tp * pp}",
        str(HERE / "parallel_worker.py"),
        str(dp),
        str(tp),
        str(accum),
        str(out),
        str(pp),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def reference():
    model = worker.full_model()
    losses = worker.train(model, lambda t: t, worker.single_process(1))
    return losses, {k: v.detach().clone() for k, v in model.named_parameters()}


@pytest.mark.parametrize(
    "dp, tp, accum, reshard, reduce_each",
    [(2, 1, 2, "1", "0"), (2, 1, 2, "0", "0"), (2, 1, 2, "1", "1"), (1, 2, 1, "1", "0"), (2, 2, 2, "1", "0")],
    ids=[
        "fsdp2-dp2-accum2",
        "fsdp2-dp2-accum2-kept-gathered",
        "fsdp2-dp2-accum2-reduce-each",
        "tp2",
        "fsdp2-dp2-x-tp2",
    ],
)
def test_two_process_training_matches_single_process(
    tmp_path, reference, dp, tp, accum, reshard, reduce_each
):
    """REDUCE_EACH_MICRO_BATCH=1 (the 8B on 80 GB cards) reduce-scatters after each micro-batch: the same
    training as one reduction a step."""
    result = torch.load(
        run_worker(
            tmp_path, dp, tp, accum, RESHARD_AFTER_FORWARD=reshard, REDUCE_EACH_MICRO_BATCH=reduce_each
        )
    )
    ref_losses, ref_state = reference
    assert result["described"][1 if tp > 1 else 2] != "off"  # [pipeline, tensor parallel, FSDP]
    assert ("kept gathered" in result["described"][2]) == (reshard == "0")
    torch.testing.assert_close(torch.tensor(result["losses"]), torch.tensor(ref_losses), atol=1e-5, rtol=1e-5)
    for name, value in ref_state.items():
        torch.testing.assert_close(result["state"][name], value, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("reduce_each", ["1", "0"], ids=["reduce-each-micro-batch", "reduce-once-a-step"])
def test_gradients_reduced_in_bf16_train_as_in_float32(tmp_path, reference, reduce_each):
    """GRAD_REDUCE_IN_FP32=0: FSDP2 reduce-scatters the gradients in bf16: the same training within bf16's
    rounding, after each micro-batch (REDUCE_EACH_MICRO_BATCH=1: the sharded float32 gradients add up in
    float32) or once a step (the unsharded gradients add up before: in float32 here, where the worker
    computes in float32; in bf16 with the GPU trainers' bf16 compute parameters, as in Megatron's bf16
    gradient buffer with grad_reduce_in_fp32=False, AMD's and NVIDIA's 8B recipe)."""
    result = torch.load(
        run_worker(tmp_path, 2, 1, 2, GRAD_REDUCE_IN_FP32="0", REDUCE_EACH_MICRO_BATCH=reduce_each)
    )
    ref_losses, ref_state = reference
    assert "fp32 master, bf16 reduce" in result["described"][2], result["described"][2]
    torch.testing.assert_close(torch.tensor(result["losses"]), torch.tensor(ref_losses), atol=0, rtol=2e-3)
    worst = max(float((result["state"][n] - v).norm() / v.norm()) for n, v in ref_state.items())
    # not bit for bit (each reduced gradient rounded to bf16), and after three AdamW steps at 1e-2, whose
    # update divides by the gradient's own size, the weights about 1% apart; a wrong reduction is 100%
    assert 0 < worst < 2e-2, worst


def test_native_fp8_under_tensor_parallelism_gives_the_single_process_gradients(tmp_path):
    """FP8_BACKEND=native with TP 2, a block's MLP (column- then row-parallel): output, input gradient and
    weight gradients within FP8's error of one process's native FP8 (the ranks scale their shards with their
    own amax). Without the sum of the replicated input's partial gradients over the TP ranks, the input
    gradient would be off by about 70%."""
    result = torch.load(run_worker(tmp_path, 1, 2, 1, FP8_BACKEND="native"))
    model = worker.full_model()
    assert "linear layers" in apply_fp8(model, Fp8Settings("native")).description
    want = worker.mlp_gradients(model)
    assert result["described"][1].startswith("DTensor TP over 2 ranks")
    assert want.keys() == result["mlp"].keys()
    for name, value in want.items():
        err = float((result["mlp"][name] - value).norm() / value.norm())
        assert err < 0.1, f"{name}: relative error {err:.3f}"


def test_native_fp8_all_gather_trains_as_the_bf16_gather(tmp_path):
    """FSDP2 over 2 processes with native FP8 linears: all-gathering the weights in FP8 (each shard cast with
    the scale of the whole weight's amax, the gathered codes unpacked from the weight's bytes) gives the same
    losses and weights as gathering them in full precision and casting them after, bit for bit, with the
    blocks resharded after forward (gathered again for backward) or kept gathered."""
    runs = {}
    for gather, reshard in ("0", "1"), ("1", "1"), ("1", "0"):
        (tmp_path / gather / reshard).mkdir(parents=True)
        out = run_worker(
            tmp_path / gather / reshard,
            2,
            1,
            2,
            FP8_BACKEND="native",
            FP8_PARAM_GATHER=gather,
            RESHARD_AFTER_FORWARD=reshard,
        )
        runs[gather, reshard] = torch.load(out)
    want = runs["0", "1"]
    assert "all-gather" not in want["described"][3]
    for key in ("1", "1"), ("1", "0"):
        got = runs[key]
        assert got["described"][3].endswith("FP8 all-gather of 14 weights"), got["described"][3]
        assert got["losses"] == want["losses"], key
        for name, value in want["state"].items():
            assert torch.equal(got["state"][name], value), (key, name)


def run_pipeline(tmp_path, dp: int, pp: int, **env: str) -> list[dict]:
    """The worker with PP stages (2 micro-batches per step): each rank's result."""
    out = run_worker(tmp_path, dp, 1, 2, pp, **env)
    return [torch.load(out.with_name(f"{out.name}.{rank}")) for rank in range(dp * pp)]


def assert_pipeline_matches(results, ref_losses, ref_state, expected_eval, eval_tol=1e-5) -> None:
    tol = 1e-5
    state = {name: value for r in results for name, value in r["state"].items()}
    assert state.keys() == ref_state.keys()  # the stages hold every weight once between them
    for r in results:
        torch.testing.assert_close(torch.tensor(r["losses"]), torch.tensor(ref_losses), atol=tol, rtol=tol)
        assert r["eval"] == pytest.approx(expected_eval, rel=eval_tol)
    for name, value in ref_state.items():
        torch.testing.assert_close(state[name], value, atol=tol, rtol=10 * tol, msg=name)


@pytest.mark.parametrize("dp, pp", [(1, 2), (2, 2)], ids=["pp2", "dp2-x-pp2"])
def test_pipeline_training_and_evaluation_match_single_process(tmp_path, reference, dp, pp):
    results = run_pipeline(tmp_path, dp, pp)
    ref_losses, ref_state = reference
    assert results[0]["described"][0].startswith(f"stage 0 of {pp} (blocks 0-0)")
    model = worker.full_model()
    model.load_state_dict(ref_state)
    expected = worker.evaluate_single(model)
    assert_pipeline_matches(results, ref_losses, ref_state, expected)


def test_pipeline_with_torchao_fp8_matches_single_process_fp8(tmp_path):
    """PP 2 with torchao's FP8 linears: each stage holds whole blocks, so its FP8 math is one process's with
    the same accumulation. (The native linear is refused with pipelines: PyTorch 2.13's stage runs forward
    and backward on uninitialized tensors to infer its shapes, and their amax became NaN scales here.)"""
    results = run_pipeline(tmp_path, 1, 2, FP8_BACKEND="torchao")
    model = worker.full_model()
    apply_fp8(model, Fp8Settings("torchao"))
    losses = worker.train(model, lambda t: t, worker.single_process(2))
    state = {k: v.detach().clone() for k, v in model.named_parameters()}
    expected = worker.evaluate_single(model)
    # evaluation pads the pipeline's last micro-batch with unlabelled sequences, which torchao's dynamic
    # scaling sees in its amax: equal within FP8's error only
    assert_pipeline_matches(results, losses, state, expected, eval_tol=1e-3)
