"""FP8 attention (FP8_DPA=1, `training.llama.fp8_attention`): a packed row run as a padded batch is exactly
the attention of its sequences, forward and backward; where cuDNN's FP8 SDPA cannot run the build says why by
name; what the build chose is on its record; the curve judge treats it as a lever."""

from __future__ import annotations

import pytest
import torch

from perf.lib.parity import lever_base
from tests.llama.helpers import tiny
from training.llama.build import RunSpec, build_model
from training.llama.flash4 import reference
from training.llama.fp8_attention import ROUND, as_batch, fp8_attention_fault, gradient_dtype, padded_index

CPU = torch.device("cpu")


def test_the_padded_index_places_each_sequence_at_the_start_of_its_row():
    cu = torch.tensor([0, 3, 5, 9], dtype=torch.int32)
    index, keep = padded_index(cu, 9)
    assert index.shape == (3, ROUND) and keep.sum() == 9
    assert index[keep].tolist() == list(range(9))  # the real tokens, in the row's order
    assert (index[~keep] == 9).all()  # padding reads the zero row past the end


def test_a_packed_row_as_a_padded_batch_is_the_attention_of_its_sequences():
    """Causal attention of the padded batch, the padding dropped, against the block-diagonal causal mask, in
    float64 (the same arithmetic on the real tokens: agreement to float64 rounding), gradients included."""
    generator = torch.Generator().manual_seed(0)
    shapes = [(1, 19, 4, 8), (1, 19, 2, 8), (1, 19, 2, 8)]
    ins = [torch.randn(s, generator=generator, dtype=torch.float64, requires_grad=True) for s in shapes]
    cu = torch.tensor([0, 7, 12, 19], dtype=torch.int32)

    def causal(q, k, v):
        out = torch.nn.functional.scaled_dot_product_attention(
            *(t.transpose(1, 2) for t in (q, k, v)), is_causal=True, enable_gqa=True
        )
        return out.transpose(1, 2)

    got = as_batch(*ins, cu, causal)
    g = torch.randn(got.shape, generator=generator, dtype=torch.float64)
    grads = torch.autograd.grad((got * g).sum(), ins)
    want = reference(*ins, cu_seqlens=cu)
    wanted = torch.autograd.grad((want * g).sum(), ins)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads, wanted):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_fp8_dpa_on_a_machine_without_cudnns_fp8_attention_is_refused_by_name():
    assert fp8_attention_fault(CPU) == "not an NVIDIA GPU"
    with pytest.raises(RuntimeError, match="cannot run here: not an NVIDIA GPU"):
        gradient_dtype(CPU)
    refusal = "FP8_DPA=1: cuDNN's FP8 attention cannot run here: not an NVIDIA GPU"
    with pytest.raises(ValueError, match=refusal):
        build_model(RunSpec(tiny(vocab_size=64), fp8_attention=True), CPU, None)
    windowed = RunSpec(tiny(vocab_size=64, sliding_window=4), fp8_attention=True)
    with pytest.raises(ValueError, match="without a sliding window"):
        build_model(windowed, CPU, None)


def test_the_build_records_the_precision_its_attention_computes_in():
    _, applied = build_model(RunSpec(tiny(vocab_size=64), precision="bf16"), CPU, None)
    assert (applied.attention, applied.attention_precision) == ("sdpa", "bf16")


def test_the_curve_judge_takes_fp8_attention_as_a_lever_over_its_mode():
    fp8w = {"PRECISION": "fp8", "FP8_BACKEND": "native", "FP8_WEIGHTS": "1"}
    ran = {"bf16": {}, "fp8w": fp8w, "fp8dpa": {**fp8w, "FP8_DPA": "1"}}
    assert lever_base("fp8dpa", ran) == "fp8w"
