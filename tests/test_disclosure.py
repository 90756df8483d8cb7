"""The 6.x disclosure keys (training/common/disclosure.py) and what a Llama build reports in them."""

import pytest
import torch

from training.common.disclosure import Disclosure, dtype_name, lowest
from training.fp8 import Fp8
from training.llama import parallel


def test_lowest_is_the_fewest_bits():
    assert lowest("fp32", "bfloat16", "fp8") == "fp8"
    assert lowest("bfloat16", "fp32") == "bfloat16"
    assert lowest("fp8", "mxfp4") == "mxfp4"
    with pytest.raises(ValueError, match="bf16"):
        lowest("bf16")  # our PRECISION name, not the rules'
    assert [dtype_name(d) for d in (torch.float32, torch.bfloat16, torch.float8_e5m2)] == [
        "fp32",
        "bfloat16",
        "fp8",
    ]


def test_the_eight_keys():
    keys = Disclosure("fp8", "bfloat16", "fp8", 2, tp=1, pp=1, cp=2).keys("/x/config_MI355X_1x8x1.sh")
    assert keys == {
        "lowest_numerical_precision_in_linear": "fp8",
        "lowest_numerical_precision_in_attn": "bfloat16",
        "lowest_numerical_precision_in_comm": "fp8",
        "tensor_parallelism": 1,
        "pipeline_parallelism": 1,
        "context_parallelism": 2,
        "expert_parallelism": 1,
        "micro_batch_size": 2,
        "config_filename": "config_MI355X_1x8x1.sh",
    }
    assert Disclosure("fp32", "fp32", "fp32", 1).keys(None)["config_filename"] != ""
    with pytest.raises(ValueError):
        Disclosure("bf16", "fp32", "fp32", 1)


@pytest.mark.parametrize(
    "applied, want",
    [
        (parallel.Applied(precision="fp32", attention_precision="fp32"), ("fp32", "fp32", "fp32")),
        (
            parallel.Applied(precision="bf16", attention_precision="bf16", collectives="bfloat16"),
            ("bfloat16", "bfloat16", "bfloat16"),
        ),
        (
            parallel.Applied(
                fp8=Fp8(backend="native"), precision="fp8", attention_precision="bf16", collectives="fp8"
            ),
            ("fp8", "bfloat16", "fp8"),
        ),
        (
            parallel.Applied(fp8=Fp8(backend="native"), precision="fp8", attention_precision="fp8"),
            ("fp8", "fp8", "fp32"),
        ),
    ],
)
def test_a_llama_build_reports_what_it_built(applied, want):
    layout = parallel.Parallelism(world_size=8, tp=1, pp=1, cp=1, dp=8, grad_accum=1)
    d = applied.disclosure(layout, 1)
    assert (d.linear, d.attn, d.comm) == want


def test_one_process_has_no_collectives():
    assert parallel.collective_precision(None, torch.bfloat16, torch.float32, True) == ""
