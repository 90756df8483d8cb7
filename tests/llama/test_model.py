"""Our Llama against Hugging Face's `LlamaForCausalLM` with the same weights (CPU, float32)."""

from __future__ import annotations

import pytest
import torch

from tests.llama.helpers import tiny
from training.llama.model import PRESETS, Llama, LlamaShape, cross_entropy, load_hf_state_dict

transformers = pytest.importorskip("transformers")

# GQA (4 query heads on 2 KV heads), Llama 3.1 RoPE scaling with a short original context so that all three
# frequency bands (kept, interpolated, scaled) occur at head_dim 16
SHAPE = tiny(ffn_hidden_size=160, vocab_size=300, max_seq_length=128)


def hf_model(shape: LlamaShape):
    config = transformers.LlamaConfig(**shape.to_hf_config(), attn_implementation="sdpa", use_cache=False)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize(
    "shape",
    [SHAPE, SHAPE.replace(rope_scaling=None, rope_theta=10000.0)],
    ids=["llama3.1-rope", "plain-rope"],
)
def test_matches_hugging_face(shape):
    hf = hf_model(shape)
    ours = Llama(shape).eval()
    load_hf_state_dict(ours, hf.state_dict())
    tokens = torch.randint(0, shape.vocab_size, (2, 96), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(input_ids=tokens).logits
        got = ours(tokens)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)
    labels = tokens.roll(-1, 1)
    hf_loss = torch.nn.functional.cross_entropy(expected.flatten(0, 1), labels.flatten())
    torch.testing.assert_close(cross_entropy(got, labels), hf_loss)


def test_gradients_match_hugging_face():
    hf = hf_model(SHAPE).train()
    ours = Llama(SHAPE).train()
    load_hf_state_dict(ours, hf.state_dict())
    tokens = torch.randint(0, SHAPE.vocab_size, (1, 64), generator=torch.Generator().manual_seed(2))
    labels = tokens.roll(-1, 1)
    cross_entropy(hf(input_ids=tokens).logits, labels).backward()
    cross_entropy(ours(tokens), labels).backward()
    hf_grads = {k.removeprefix("model."): p.grad for k, p in hf.named_parameters()}
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, hf_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_packed_rows_attend_within_each_sequence():
    """A row packing two sequences (cu_seqlens + restarting positions) equals the two run separately."""
    torch.manual_seed(0)
    model = Llama(SHAPE).eval()
    model.init_weights()
    a = torch.randint(0, SHAPE.vocab_size, (1, 40))
    b = torch.randint(0, SHAPE.vocab_size, (1, 24))
    packed = torch.cat([a, b], dim=1)
    positions = torch.cat([torch.arange(40), torch.arange(24)]).unsqueeze(0)
    cu = torch.tensor([0, 40, 64], dtype=torch.int32)
    with torch.no_grad():
        got = model(packed, position_ids=positions, cu_seqlens=cu, max_seqlen=40)
        expected = torch.cat([model(a), model(b)], dim=1)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_8b_shape_counts():
    shape = PRESETS["8b"]
    assert shape.num_params() == 8_030_261_248  # Llama 3.1 8B
    # NVIDIA config_common_8b.sh: MODEL_TFLOP_PER_SAMPLE=421.59 (their count differs in the last digits)
    assert shape.flops_per_token(8192) * 8192 / 1e12 == pytest.approx(421.6, abs=0.1)
    with torch.device("meta"):
        model = Llama(shape)
    assert sum(p.numel() for p in model.parameters()) == shape.num_params()
