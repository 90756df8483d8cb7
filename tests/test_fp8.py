"""training.common.fp8's Transformer Engine path with a stand-in `transformer_engine` (not installable here):
the block linears are swapped for TE's, keeping their weights and biases, heads untouched."""

import contextlib
import importlib.machinery
import sys
import types

import torch
from torch import nn

from training.bert.model import BertForPackedPretraining, BertShape
from training.common.fp8 import apply_fp8


class FakeTeLinear(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, params_dtype=None, device=None):
        super().__init__(in_features, out_features, bias=bias, dtype=params_dtype, device=device)


def fake_transformer_engine(monkeypatch) -> list[str]:
    entered = []
    te, pytorch, common, recipe = (types.ModuleType(n) for n in (
        "transformer_engine", "transformer_engine.pytorch", "transformer_engine.common",
        "transformer_engine.common.recipe"))  # fmt: skip
    te.__spec__ = importlib.machinery.ModuleSpec("transformer_engine", None)
    pytorch.Linear = FakeTeLinear
    pytorch.fp8_autocast = lambda enabled, fp8_recipe: contextlib.nullcontext(entered.append(fp8_recipe))
    recipe.DelayedScaling = lambda **kw: kw
    recipe.Format = types.SimpleNamespace(HYBRID="hybrid")
    te.pytorch, te.common, common.recipe = pytorch, common, recipe
    for module in (te, pytorch, common, recipe):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return entered


def test_te_swaps_bert_encoder_linears_keeping_weights_and_biases(monkeypatch):
    entered = fake_transformer_engine(monkeypatch)
    torch.manual_seed(0)
    model = BertForPackedPretraining(BertShape(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                               num_attention_heads=4, vocab_size=128))  # fmt: skip
    for p in model.parameters():  # non-zero biases, as a checkpoint has
        nn.init.normal_(p)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fp8 = apply_fp8(model, True, "auto")
    assert fp8.backend == "te" and "8 linear layers" in fp8.description
    assert type(model.layers[1].ffn_out) is FakeTeLinear and type(model.mlm_transform) is nn.Linear
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    with fp8.forward_context():
        pass
    assert entered == [{"fp8_format": "hybrid", "amax_history_len": 4, "amax_compute_algo": "most_recent"}]
