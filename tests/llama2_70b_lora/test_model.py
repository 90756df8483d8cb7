"""The LoRA benchmark's model on the CPU: the adapters (against peft's, merged, frozen base), a Hugging Face
checkpoint loaded shard by shard, packed rows, the loss mask, FP8-stored frozen weights."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.llama2_70b_lora.fixtures import CONFIG, save_tiny_llama2
from training.fp8 import Fp8Settings, MlpLayout, apply_fp8, store_weights_in_fp8
from training.llama import model as llama_model
from training.llama import parallel
from training.llama.checkpoint import CheckpointError, load_hf_checkpoint, shape_from_hf_config
from training.llama.model import MLP, Llama, cross_entropy
from training.lora import LoraSettings, apply_lora, merge_lora


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_tiny_llama2(tmp_path_factory.mktemp("tiny_llama2"))


def ours(folder, lora: LoraSettings | None = None) -> Llama:
    with torch.device("meta"):
        model = Llama(shape_from_hf_config(folder))
    apply_lora(model, lora)
    model.to_empty(device="cpu")
    load_hf_checkpoint(model, folder, show_progress=False)
    if lora is not None:
        from training.lora import reset_lora

        reset_lora(model)
    return model


def tokens(n: int = 2, seq: int = 48, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, CONFIG["vocab_size"], (n, seq), generator=torch.Generator().manual_seed(seed))


def test_the_checkpoint_loads_shard_by_shard_and_gives_transformers_logits(checkpoint):
    import transformers

    hf = transformers.LlamaForCausalLM.from_pretrained(checkpoint, torch_dtype=torch.float32)
    x = tokens()
    with torch.no_grad():
        torch.testing.assert_close(ours(checkpoint)(x), hf(input_ids=x).logits, rtol=1e-4, atol=1e-4)


def test_a_checkpoint_that_does_not_fit_is_named(checkpoint, tmp_path):
    with torch.device("meta"):
        model = Llama(shape_from_hf_config(checkpoint).replace(num_layers=3))
    model.to_empty(device="cpu")
    with pytest.raises(CheckpointError, match="lacks 9 tensor.s. of the model, e.g. model.layers.2"):
        load_hf_checkpoint(model, checkpoint, show_progress=False)
    with torch.device("meta"):
        model = Llama(shape_from_hf_config(checkpoint).replace(ffn_hidden_size=64))
    model.to_empty(device="cpu")
    shapes = r"gate_proj.weight has shape \(96, 64\), the model's layers.0.mlp.gate_proj.weight \(64, 64\)"
    with pytest.raises(CheckpointError, match=shapes):
        load_hf_checkpoint(model, checkpoint, show_progress=False)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="config.json: no num_hidden_layers"):
        shape_from_hf_config(tmp_path)


def test_a_fresh_adapter_changes_nothing_and_only_adapters_train(checkpoint):
    base, adapted = ours(checkpoint), ours(checkpoint, LoraSettings(rank=16, alpha=32, dropout=0.1))
    x = tokens()
    adapted.train()  # dropout on: B is zero, so the output is still the base's
    torch.testing.assert_close(adapted(x), base(x), rtol=0, atol=0)
    trainable = {n for n, p in adapted.named_parameters() if p.requires_grad}
    assert trainable and all(".qkv_adapter." in n or ".o_adapter." in n for n in trainable)
    assert len(trainable) == 4 * CONFIG["num_hidden_layers"]  # A and B of two adapters per block


def test_a_trained_adapter_equals_its_merged_weight(checkpoint):
    model = ours(checkpoint, LoraSettings(rank=4, alpha=8, dropout=0.0))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    x = tokens()
    for _ in range(3):
        cross_entropy(model(x[:, :-1]), x[:, 1:]).backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        adapted = model(x)
        assert merge_lora(model) == CONFIG["num_hidden_layers"]
        merged = model(x)
    assert not torch.equal(adapted, ours(checkpoint)(x))  # the adapters learned something
    torch.testing.assert_close(merged, adapted, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("keep_attention", [False, True])
@pytest.mark.parametrize("compiled", ["eager", "inside", "whole"])
def test_a_recomputed_block_drops_what_its_forward_dropped(checkpoint, compiled, keep_attention, monkeypatch):
    """LoRA's dropout under activation checkpointing: the recompute must draw the forward's mask (with a
    fresh one, B's gradient comes from inputs the loss never saw). Eager, compiled inside the eager
    checkpoint (FP8 blocks) and compiled with it (BF16 blocks), recomputing all or all but the attention
    kernel: the same loss and gradients as the block run once. Kept, the attention runs once a block."""
    runs, attention = [], llama_model.attention
    for checkpointed in (False, True):
        torch._dynamo.reset()  # each run compiles its own blocks (no cache limit reached: eager fallback)
        torch.manual_seed(0)  # A's initialization
        model = ours(checkpoint, LoraSettings(rank=4, alpha=8, dropout=0.5))
        with torch.no_grad():  # B non-zero, so that A's gradient depends on the mask too
            for name, p in model.named_parameters():
                if name.endswith("lora_b.weight"):
                    p.normal_(std=0.1, generator=torch.Generator().manual_seed(len(name)))
        parallel.apply_activation_checkpointing(model, checkpointed, keep_attention=keep_attention)
        parallel.apply_compile(model, compiled != "eager", checkpoint_outside=compiled == "inside")
        calls = []
        counted = lambda *a, c=calls, **k: c.append(1) or attention(*a, **k)  # noqa: E731
        monkeypatch.setattr(llama_model, "attention", counted)
        torch.manual_seed(3)
        x = tokens()
        # eager's generator in compiled code too: the block compiled with its checkpoint and without are two
        # graphs, which inductor's own generator would give different masks
        with torch._inductor.config.patch(fallback_random=True):
            loss = cross_entropy(model(x[:, :-1]), x[:, 1:])
            loss.backward()
        runs.append((loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.requires_grad}))
        if compiled == "eager":  # (compiled code does not call the module's function again)
            blocks = len(model.layers)
            assert len(calls) == blocks * (2 if checkpointed and not keep_attention else 1)
    (loss, grads), (loss2, grads2) = runs
    assert torch.equal(loss, loss2)
    for name, grad in grads.items():
        torch.testing.assert_close(grads2[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_the_fused_qkv_adapter_is_peft_on_a_fused_qkv_layer(checkpoint):
    """The MLPerf recipe's adapter on the fused q|k|v projection (one A for the three) is what peft computes
    on a fused QKV linear (the MLCommons reference's fused-QKV checkpoint), with the same A and B."""
    import peft

    model = ours(checkpoint, LoraSettings(rank=4, alpha=8, dropout=0.0))
    attn = model.layers[0].self_attn
    torch.manual_seed(1)
    nn.init.normal_(attn.qkv_adapter.lora_b.weight)
    fused = nn.Sequential()
    fused.qkv_proj = nn.Linear(CONFIG["hidden_size"], attn.q_proj.out_features * 2, bias=False)
    with torch.no_grad():
        fused.qkv_proj.weight.copy_(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
    wrapped = peft.get_peft_model(
        fused, peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["qkv_proj"])
    )
    layer = wrapped.base_model.model.qkv_proj
    with torch.no_grad():
        layer.lora_A["default"].weight.copy_(attn.qkv_adapter.lora_a.weight)
        layer.lora_B["default"].weight.copy_(attn.qkv_adapter.lora_b.weight)
        x = torch.randn(3, CONFIG["hidden_size"])
        want = layer(x)
        got = torch.cat([attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)], -1) + attn.qkv_adapter(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_packed_row_equals_its_sequences_one_by_one(checkpoint):
    model = ours(checkpoint)
    seqs = [tokens(1, n, seed=n) for n in (17, 9, 22)]
    row = torch.cat(seqs, 1)
    positions = torch.cat([torch.arange(s.shape[1]) for s in seqs]).unsqueeze(0)
    cu = torch.tensor([0, 17, 26, 48], dtype=torch.int32)
    with torch.no_grad():
        packed = model(row, position_ids=positions, cu_seqlens=cu)
        alone = torch.cat([model(s) for s in seqs], 1)
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # without the boundaries the later sequences see the earlier ones: not the same
        assert not torch.allclose(model(row), alone, atol=1e-3)


def test_the_loss_scores_only_the_masked_in_tokens():
    """The rows' micro-batches (training.llama2_70b_lora.data): labels -100 where the next token's loss_mask
    is 0 and at a sequence's last token (its next is another sequence's first), positions restarting."""
    from training.llama2_70b_lora.data import Rows, micro_batch

    ids = torch.arange(10, dtype=torch.int32).unsqueeze(0)
    mask = torch.tensor([[0, 0, 1, 1, 1, 0, 0, 1, 1, 1]], dtype=torch.bool)
    tokens_, labels, positions, cu = micro_batch(Rows(ids, mask, [[0, 5]]), [0])
    assert tokens_.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7, 8, 0]]  # the last position is padding
    assert labels.tolist() == [[-100, 2, 3, 4, -100, -100, 7, 8, 9, -100]]
    assert positions.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3, 4]] and cu.tolist() == [0, 5, 10]
    logits = torch.randn(1, 10, 16)
    scored = labels != -100
    want = nn.functional.cross_entropy(logits[scored], labels[scored])
    torch.testing.assert_close(cross_entropy(logits, labels), want)


def test_rows_of_one_sequence_are_a_dense_batch_with_the_packed_loss(checkpoint):
    """The MLCommons rows (one sequence each) go to the model as a (MBS, seq) batch under plain causal
    attention, not packed (FlashAttention-2 varlen and a host sync per block): the same loss as packing them
    end to end, and the same tokens and labels."""
    from training.llama2_70b_lora.data import Rows, micro_batch

    ids = tokens(3, 12, seed=4).to(torch.int32)
    mask = torch.ones(3, 12, dtype=torch.bool)
    mask[:, :4] = False
    rows = Rows(ids, mask, [[0], [0], [0]])
    dense = micro_batch(rows, [0, 1])
    assert len(dense) == 2 and dense[0].shape == (2, 12)
    assert dense[0][1].tolist() == [*ids[1, :-1].tolist(), 0]
    assert dense[1][0].tolist() == [-100] * 3 + ids[0, 4:].tolist() + [-100]
    packed = micro_batch(Rows(ids, mask, [[0], [0], [0, 6]]), [0, 1, 2])  # one packed row packs them all
    assert len(packed) == 4 and packed[3].tolist() == [0, 12, 24, 30, 36]
    model = ours(checkpoint)
    with torch.no_grad():
        want = cross_entropy(
            model(
                packed[0][:, :24],
                position_ids=packed[2][:, :24],
                cu_seqlens=packed[3][:3],
            ),
            packed[1][:, :24],
        )
        got = cross_entropy(model(dense[0]), dense[1])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_fp8_stored_frozen_weights_give_the_same_bits(checkpoint):
    """Frozen weights stored as e4m3 codes (FP8_WEIGHTS: the 80-layer model on one GPU) compute what the
    native FP8 linears computed from the bf16 weights: the same output and input gradient, bit for bit,
    through the linears and the fused MLP, the adapters training."""
    runs = []
    for stored in (False, True):
        torch.manual_seed(0)
        model = ours(checkpoint, LoraSettings(rank=4, alpha=8, dropout=0.0))
        layout = MlpLayout(MLP, up="up_proj", down="down_proj", gate="gate_proj")
        apply_fp8(model, Fp8Settings("native", fuse_mlp=layout))
        if stored:
            assert store_weights_in_fp8(model) == 7 * CONFIG["num_hidden_layers"]
            assert model.layers[0].mlp.up_proj.weight.dtype == torch.float8_e4m3fn
        x = torch.randn(2, 16, CONFIG["hidden_size"], requires_grad=True)
        with torch.autocast("cpu", torch.bfloat16):
            y = model.layers[0](x, *rope(model, 16))
        y.float().pow(2).mean().backward()
        runs.append((y.detach(), x.grad, model.layers[0].self_attn.o_adapter.lora_a.weight.grad))
    (y, dx, da), (y2, dx2, da2) = runs
    assert torch.equal(y, y2) and torch.equal(dx, dx2) and torch.equal(da, da2)


def rope(model: Llama, seq: int):
    from training.llama.model import rope_frequencies

    freqs = torch.arange(seq).float().unsqueeze(-1) * rope_frequencies(model.shape)
    angles = torch.cat((freqs, freqs), -1).unsqueeze(0).unsqueeze(2)
    return angles.cos(), angles.sin()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("recomputed,offloaded", [(0, 1), (0, 2), (1, 1)])
def test_offloaded_blocks_give_the_same_loss_and_gradients(checkpoint, compiled, recomputed, offloaded):
    """ACTIVATION_OFFLOAD_LAYERS: the blocks after the recomputed ones keep what their forward saves in host
    memory (here host tensors, every size), eager and with their parts compiled, the block after them (if
    any) starting the copies back: the loss and the adapters' gradients of two steps equal those of the
    blocks kept as they are, bit for bit (the copies are exact)."""
    runs = []
    for offload in (0, offloaded):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = ours(checkpoint, LoraSettings(rank=4, alpha=8, dropout=0.5))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("lora_b.weight"):
                    p.normal_(std=0.1, generator=torch.Generator().manual_seed(len(name)))
        change = parallel.apply_activation_checkpointing(
            model, recomputed > 0, recomputed, offload_layers=offload
        )
        hosts = {id(block.offload) for block in model.layers if block.offload is not None}
        assert len(hosts) == (1 if offload else 0)
        assert [block.offload is not None for block in model.layers] == [
            recomputed <= i < recomputed + offload for i in range(len(model.layers))
        ]
        assert [block.announce is not None for block in model.layers] == [
            offload > 0 and i == recomputed + offload for i in range(len(model.layers))
        ]
        for block in model.layers:
            if block.offload is not None:
                block.offload.min_bytes = 0
        parallel.apply_compile(model, compiled, checkpoint_outside=True)
        losses = []
        torch.manual_seed(3)
        for step in range(2):
            x = tokens(seed=step)
            with torch._inductor.config.patch(fallback_random=True):
                loss = cross_entropy(model(x[:, :-1]), x[:, 1:])
                loss.backward()
            losses.append(loss.detach())
        grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
        host = model.layers[recomputed].offload
        group = host.last if offload else None
        while group is not None:  # after the backward, nothing brought back is held
            assert group.back is not None and all(t is None for t in group.back)
            group = group.previous
        copied = host.copied_bytes if offload else 0
        runs.append((losses, grads, copied, change.description))
    (losses, grads, _, _), (losses2, grads2, copied, description) = runs
    assert copied > 0 and "in host memory" in description
    assert all(torch.equal(a, b) for a, b in zip(losses, losses2))
    for name, grad in grads.items():
        assert torch.equal(grads2[name], grad), name


def test_fp8_calibration_recomputes_offloaded_blocks_instead_of_copying_them(checkpoint):
    """FP8's calibration pass (`recompute_every_block`, eager bf16, more saved than FP8 saves) recomputes
    the offloaded blocks too: nothing goes to host memory then; the next step offloads as set."""
    from training.llama.checkpointing import recompute_every_block

    model = ours(checkpoint, LoraSettings(rank=4, alpha=8, dropout=0.1))
    parallel.apply_activation_checkpointing(model, False, offload_layers=2)
    host = model.layers[0].offload
    host.min_bytes = 0
    x = tokens()
    with recompute_every_block(model):
        cross_entropy(model(x[:, :-1]), x[:, 1:]).backward()
    assert host.copied_bytes == 0
    cross_entropy(model(x[:, :-1]), x[:, 1:]).backward()
    assert host.copied_bytes > 0
