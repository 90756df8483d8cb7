"""LoRA's dropout and A in one Triton kernel (`training.lora.fused`): chosen only on a GPU where it checks
out, PyTorch's path elsewhere (LORA_KERNEL's errors: `test_train`); on a GPU, the kernel against float32
products on its own mask, and the mask drawn again the same by every kind of activation checkpointing."""

from __future__ import annotations

import pytest
import torch

from training.llama import parallel
from training.llama.model import Llama, LlamaShape, cross_entropy
from training.lora import LoraAdapter, LoraSettings, apply_lora, fused

GPU = pytest.mark.skipif(
    not (torch.cuda.is_available() and fused.kernels is not None), reason="needs a GPU with Triton"
)


def test_the_kernel_is_chosen_only_on_a_gpu_and_by_name():
    assert fused.choose_kernel("auto", torch.device("cpu")) == (False, "nn.Dropout then A (PyTorch)")
    assert fused.choose_kernel("pytorch", torch.device("cpu"))[1].endswith("(LORA_KERNEL=pytorch)")
    with pytest.raises(ValueError, match="LoRA kernel 'triton': choose one of auto, pytorch"):
        fused.choose_kernel("triton", torch.device("cpu"))


def test_an_adapter_given_the_kernel_runs_pytorch_where_the_kernel_does_not_fit():
    settings = LoraSettings(rank=16, alpha=32, dropout=0.5)
    torch.manual_seed(0)
    plain = LoraAdapter(128, 64, settings)
    torch.manual_seed(0)
    kernel = LoraAdapter(128, 64, LoraSettings(16, 32, 0.5), kernel=True)
    with torch.no_grad():
        plain.lora_b.weight.normal_()
        kernel.lora_b.weight.copy_(plain.lora_b.weight)
    x = torch.randn(4, 128)  # a CPU float32 input: not the kernel's
    torch.manual_seed(1)
    want = plain(x)
    torch.manual_seed(1)
    torch.testing.assert_close(kernel(x), want, rtol=0, atol=0)


@GPU
def test_the_kernel_matches_float32_products_on_its_own_mask():
    assert fused.dropout_down_fault.__wrapped__(torch.device("cuda")) == ""
    # a larger case, the LoRA benchmark's adapter width, several rows of tiles per backward split
    fault = fused.dropout_down_fault.__wrapped__(torch.device("cuda"), 0.25, (1000, 8192), 16)
    assert fault == ""


@GPU
@pytest.mark.parametrize("keep_attention", [False, True])
@pytest.mark.parametrize("compiled", ["eager", "inside", "whole"])
def test_a_recomputed_block_draws_the_kernels_mask_again(compiled, keep_attention, monkeypatch):
    """As `test_model.test_a_recomputed_block_drops_what_its_forward_dropped`, on a GPU with the kernel: the
    same loss and gradients with and without activation checkpointing."""
    shape = LlamaShape(
        num_layers=2,
        hidden_size=128,
        ffn_hidden_size=256,
        num_heads=2,
        num_kv_heads=1,
        vocab_size=512,
        max_seq_length=64,
        rope_theta=10000.0,
        rope_scaling=None,
    )
    x = torch.randint(0, shape.vocab_size, (2, 65), generator=torch.Generator().manual_seed(0)).cuda()
    runs, calls, lora_down = [], [], fused.lora_down
    monkeypatch.setattr(fused, "lora_down", lambda *a: calls.append(1) or lora_down(*a))
    for checkpointed in (False, True):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = Llama(shape, "sdpa")
        model.init_weights()
        model = model.cuda().bfloat16()
        settings = LoraSettings(rank=16, alpha=32, dropout=0.5, kernel="auto")
        assert "checked on this GPU" in apply_lora(model, settings)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("lora_b.weight"):
                    p.normal_(std=0.1)
        parallel.apply_activation_checkpointing(model, checkpointed, keep_attention=keep_attention)
        parallel.apply_compile(model, compiled != "eager", checkpoint_outside=compiled == "inside")
        torch.manual_seed(3)
        with torch._inductor.config.patch(fallback_random=True), torch.autocast("cuda", torch.bfloat16):
            loss = cross_entropy(model(x[:, :-1]), x[:, 1:])
            loss.backward()
        runs.append((loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.requires_grad}))
    (loss, grads), (loss2, grads2) = runs
    assert calls and torch.isfinite(loss)  # (the kernel ran, traced or called)
    torch.testing.assert_close(loss2, loss, rtol=1e-3, atol=1e-3)
    for name, grad in grads.items():
        torch.testing.assert_close(grads2[name], grad, rtol=2e-2, atol=2e-3, msg=name)
