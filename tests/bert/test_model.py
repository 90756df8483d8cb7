"""The packed-row model: a row of several sequences gives the same outputs as each sequence alone,
and the whole model matches Hugging Face's BertForPreTraining with the same weights."""

import numpy as np
import pytest
import torch

from tests.bert.synthetic import make_sequence
from training.bert import attention
from training.bert.attention import packed_attention
from training.bert.cudnn_attention import IDENTITY_TOLERANCE, dropout_identity_error
from training.bert.data import collate
from training.bert.model import (
    _LAYER,
    _TOP,
    BertForPackedPretraining,
    BertShape,
    from_hf_state_dict,
    pretraining_loss,
)

SHAPE = BertShape(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def packed_row(seqs):
    offsets = np.concatenate([[0], np.cumsum([len(s[0]) for s in seqs])[:-1]])
    return (
        np.concatenate([s[0] for s in seqs]),
        np.concatenate([s[1] for s in seqs]),
        np.concatenate([s[2] + o for s, o in zip(seqs, offsets)]),
        np.concatenate([s[3] for s in seqs]),
        np.array([len(s[0]) for s in seqs]),
        np.array([len(s[2]) for s in seqs]),
        np.array([s[4] for s in seqs]),
    )


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return BertForPackedPretraining(SHAPE).double().eval()


@pytest.fixture(scope="module")
def seqs():
    rng = np.random.default_rng(1)
    return [make_sequence(rng, n) for n in (130, 200, 170)]


def test_packed_row_equals_sequences_one_by_one(model, seqs):
    with torch.no_grad():
        mlm, nsp = model(collate([packed_row(seqs)], 512))
        alone = [model(collate([packed_row([s])], 512)) for s in seqs]
    torch.testing.assert_close(mlm, torch.cat([a[0] for a in alone]), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(nsp, torch.cat([a[1] for a in alone]), rtol=1e-10, atol=1e-10)


def test_batch_indices_restart_per_sequence(seqs):
    b = collate([packed_row(seqs), packed_row(seqs[:1])], 512)
    assert b.position_ids[0, 130].item() == 0 and b.position_ids[0, 129].item() == 129
    assert b.seq_ids[0, :500].unique().tolist() == [1, 2, 3] and b.seq_ids[0, 500:].eq(0).all()
    assert b.cls_index.tolist() == [0, 130, 330, 512]
    assert b.cu_seqlens.tolist() == [0, 130, 330, 500, 512, 642, 1024]
    assert b.num_sequences == 4 and len(b.mlm_index) == len(b.mlm_labels)


def test_loss_is_finite_and_backward_reaches_every_parameter(seqs):
    torch.manual_seed(0)
    m = BertForPackedPretraining(SHAPE)
    b = collate([packed_row(seqs)], 512)
    loss = pretraining_loss(*m(b), b)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in m.parameters())


def test_bf16_residual_stream_keeps_the_loss_within_bf16_rounding(seqs):
    torch.manual_seed(0)
    m = BertForPackedPretraining(SHAPE).eval()  # no dropout: the same inputs give the same loss
    b = collate([packed_row(seqs)], 512)
    dtypes, losses = [], []
    m.layers[1].ffn_norm.register_forward_hook(lambda mod, args, out: dtypes.append(out.dtype))
    for residual in (None, torch.bfloat16, None):
        m.set_residual_dtype(residual)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            losses.append(pretraining_loss(*m(b), b).item())
    assert dtypes == [torch.float32, torch.bfloat16, torch.float32]
    assert losses[0] == losses[2] and losses[1] != losses[0]
    assert abs(losses[1] - losses[0]) < 1e-2 * abs(losses[0])


def to_hf(ours: dict, layers: int) -> dict:
    """Inverse of from_hf_state_dict (the test checks the round trip)."""
    hf = {theirs: ours[mine] for theirs, mine in _TOP.items()}
    for i in range(layers):
        weights, biases = ours[f"layers.{i}.qkv.weight"].chunk(3), ours[f"layers.{i}.qkv.bias"].chunk(3)
        for name, w, bias in zip(("query", "key", "value"), weights, biases):
            hf[f"bert.encoder.layer.{i}.attention.self.{name}.weight"] = w
            hf[f"bert.encoder.layer.{i}.attention.self.{name}.bias"] = bias
        for theirs, mine in _LAYER.items():
            for s in ("weight", "bias"):
                hf[f"bert.encoder.layer.{i}.{theirs}.{s}"] = ours[f"layers.{i}.{mine}.{s}"]
    return hf


def test_matches_hugging_face_bert(model, seqs):
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.BertConfig(
        vocab_size=SHAPE.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        hidden_act="gelu",
        attn_implementation="eager",
    )
    hf = transformers.BertForPreTraining(hf_cfg).double().eval()
    state = to_hf(model.state_dict(), SHAPE.num_hidden_layers)
    state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and all("decoder.weight" in k or "position_ids" in k for k in missing)
    hf.tie_weights()
    torch.testing.assert_close(
        from_hf_state_dict(hf.state_dict(), 2)["layers.1.qkv.weight"],
        model.state_dict()["layers.1.qkv.weight"],
    )
    b = collate([packed_row(seqs)], 512)
    with torch.no_grad():
        mlm, nsp = model(b)
        for i, s in enumerate(seqs):
            out = hf(
                input_ids=torch.from_numpy(s[0].astype(np.int64))[None],
                token_type_ids=torch.from_numpy(s[1].astype(np.int64))[None],
            )
            torch.testing.assert_close(out.seq_relationship_logits[0], nsp[i], rtol=1e-9, atol=1e-9)
        first = seqs[0]
        out = hf(
            input_ids=torch.from_numpy(first[0].astype(np.int64))[None],
            token_type_ids=torch.from_numpy(first[1].astype(np.int64))[None],
        )
        torch.testing.assert_close(
            out.prediction_logits[0, first[2].astype(np.int64)], mlm[: len(first[2])], rtol=1e-9, atol=1e-9
        )


def test_torch_flash_is_refused_by_name_where_it_cannot_run():
    if attention.torch_flash_fault() is None:
        pytest.skip("PyTorch's varlen flash kernel runs here")
    with pytest.raises(ValueError, match="ATTENTION=torch_flash"):
        attention.choose_attention("torch_flash")
    assert attention.choose_attention("auto") in ("sdpa", "sdpa_cudnn", "flash_attn")


def _fault(impl: str) -> str | None:
    if impl == "torch_flash":
        return attention.torch_flash_fault()
    from training.bert.cudnn_attention import cudnn_ragged_fault

    return cudnn_ragged_fault()


@pytest.mark.parametrize("impl", ["torch_flash", "cudnn_ragged"])
def test_varlen_kernels_match_the_masked_sdpa_and_drop_the_same_in_backward(seqs, impl):
    if fault := _fault(impl):
        pytest.skip(f"{impl}: {fault}")
    b = collate([packed_row(seqs), packed_row(seqs[1:])], 512).to("cuda")
    qkv = torch.randn(2, 512, 3, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    real = b.seq_ids > 0
    ref = packed_attention("sdpa", qkv.float(), b)[real]
    out = packed_attention(impl, qkv, b)[real]
    # bf16 inputs and output: a few roundings of 2^-8 relative each
    assert float((out.float() - ref).norm() / ref.norm()) < 1e-2
    # With dropout, the backward must drop what the forward did (`dropout_identity_error`).
    g = torch.randn(2, 512, 4, 64, device="cuda", dtype=torch.bfloat16)
    out = packed_attention(impl, qkv, b, dropout_p=0.1)
    out.backward(g)
    flat = [t.reshape(1024, 4, 64) for t in (out, g, qkv[:, :, 2], qkv.grad[:, :, 2])]
    assert dropout_identity_error(*flat, b.cu_seqlens) < IDENTITY_TOLERANCE


def test_cudnn_ragged_is_refused_by_name_where_it_cannot_run():
    if _fault("cudnn_ragged") is None:
        pytest.skip("cuDNN's ragged attention runs here")
    with pytest.raises(ValueError, match="ATTENTION=cudnn_ragged"):
        attention.choose_attention("cudnn_ragged")


def test_cudnn_ragged_draws_new_dropout_at_each_cuda_graph_replay_and_its_backward_drops_the_same():
    if fault := _fault("cudnn_ragged"):
        pytest.skip(f"cudnn_ragged: {fault}")
    from training.bert.cudnn_attention import ragged_attention

    cu = torch.tensor([0, 300, 512, 700, 1024, 1024, 1024], dtype=torch.int32, device="cuda")
    qkv = torch.randn(1024, 3, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(1024, 4, 64, device="cuda", dtype=torch.bfloat16)

    def step():
        qkv.grad = None
        out = ragged_attention(qkv, cu, 512, 0.1)
        out.backward(g)
        return out

    def identity(out) -> float:
        return dropout_identity_error(out, g, qkv[:, 2], qkv.grad[:, 2], cu)

    eager = identity(step())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warms up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    seen, replayed = [], []
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        replayed.append(identity(out))
        seen.append(out.clone())
    assert max(eager, *replayed) < IDENTITY_TOLERANCE, f"eager {eager:.2e}, replayed {replayed}"
    assert not torch.equal(seen[0], seen[1])  # a new dropout mask at each replay


def test_the_dropout_identity_tells_a_backward_that_drops_other_elements():
    """`dropout_identity_error` on attention computed here in float32 with a known mask, its outputs rounded
    to bf16 as a kernel's are: the backward's mask the forward's, within the bound; another, far over it."""
    generator = torch.Generator().manual_seed(0)
    cu = torch.tensor([0, 100, 256, 300, 512, 512], dtype=torch.int32)
    qkv = torch.randn(512, 3, 2, 64, generator=generator).bfloat16().float()
    g = torch.randn(512, 2, 64, generator=generator).bfloat16().float()
    within, beyond = (lambda e: e < IDENTITY_TOLERANCE), (lambda e: e > 4 * IDENTITY_TOLERANCE)
    for same, check in ((True, within), (False, beyond)):
        out, dv = torch.zeros(512, 2, 64), torch.zeros(512, 2, 64)
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
            q, k, v = (qkv[a:b, i].transpose(0, 1) for i in range(3))
            p = torch.softmax(q @ k.transpose(1, 2) / 8, -1)
            kept = (torch.rand(p.shape, generator=generator) >= 0.1) / 0.9
            other = kept if same else (torch.rand(p.shape, generator=generator) >= 0.1) / 0.9
            out[a:b] = ((p * kept) @ v).transpose(0, 1)
            dv[a:b] = ((p * other).transpose(1, 2) @ g[a:b].transpose(0, 1)).transpose(0, 1)
        error = dropout_identity_error(out.bfloat16(), g, qkv[:, 2], dv.bfloat16(), cu)
        assert check(error), (same, error)
