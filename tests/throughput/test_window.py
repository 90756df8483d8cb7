"""Mistral's sliding window in the shared Llama model: each query sees itself and the window - 1 tokens
before it, against a reference computed one query at a time; and no window (or one no shorter than the
sequence) leaves the model's output bit for bit as it was."""

from __future__ import annotations

import pytest
import torch

from training.llama.attention import attention, choose_attention, cudnn_window_fault
from training.llama.model import Llama, LlamaShape


def reference(q, k, v, window: int) -> torch.Tensor:
    """Softmax attention of each query over keys i - window < j <= i, in float64, one query at a time."""
    b, s, heads, dim = q.shape
    groups = heads // k.shape[2]
    k, v = (t.double().repeat_interleave(groups, dim=2) for t in (k, v))
    out = torch.zeros(b, s, heads, dim, dtype=torch.float64)
    for i in range(s):
        lo = max(0, i - window + 1)
        scores = torch.einsum("bhd,bjhd->bhj", q[:, i].double(), k[:, lo : i + 1]) / dim**0.5
        out[:, i] = torch.einsum("bhj,bjhd->bhd", scores.softmax(-1), v[:, lo : i + 1])
    return out


def test_windowed_attention_matches_the_reference_with_gqa():
    torch.manual_seed(0)
    q = torch.randn(2, 40, 4, 8, requires_grad=True)
    k, v = (torch.randn(2, 40, 2, 8, requires_grad=True) for _ in range(2))
    out = attention(q, k, v, "sdpa", window=7)
    torch.testing.assert_close(out.double(), reference(q, k, v, 7), rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected = torch.autograd.grad(reference(q, k, v, 7).square().sum(), (q, k, v))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got.double(), want.double(), rtol=1e-4, atol=1e-5)


def test_a_token_never_attends_beyond_4096_back():
    """Mistral 7B's window: changing token 0's key and value moves queries 0-4095, not 4096 on."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4100, 1, 8) for _ in range(3))
    before = attention(q, k, v, "sdpa", window=4096)
    k2, v2 = k.clone(), v.clone()
    k2[:, 0], v2[:, 0] = 5.0, 5.0
    after = attention(q, k2, v2, "sdpa", window=4096)
    changed = (after - before).abs().amax(dim=(0, 2, 3)) > 0
    assert changed[:4096].all() and not changed[4096:].any()


@pytest.mark.parametrize("window", [None, 16, 64])
def test_no_window_or_one_as_long_as_the_sequence_leaves_the_model_unchanged(window):
    shape = LlamaShape(
        num_layers=2,
        hidden_size=32,
        ffn_hidden_size=64,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=64,
        max_seq_length=16,
    )
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    plain = Llama(shape)
    plain.init_weights()
    torch.manual_seed(0)
    windowed = Llama(shape.replace(sliding_window=window))
    windowed.init_weights()
    assert torch.equal(plain(tokens), windowed(tokens))
    shorter = Llama(shape.replace(sliding_window=4))
    shorter.load_state_dict(plain.state_dict())
    assert not torch.equal(plain(tokens), shorter(tokens))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch's flash kernel needs a GPU")
def test_the_gpu_kernel_matches_the_band_mask():
    """The GPU path (varlen_attn with a window, GQA) against the band mask on the CPU, both directions."""
    from training.llama.attention import TORCH_WINDOW_ATTENTION

    if TORCH_WINDOW_ATTENTION is None:
        pytest.skip(f"torch {torch.__version__} has no varlen_attn with a window")
    torch.manual_seed(0)
    shapes = [(2, 300, 8, 64), (2, 300, 2, 64), (2, 300, 2, 64)]
    cpu = [torch.randn(s, requires_grad=True) for s in shapes]
    gpu = [t.detach().cuda().bfloat16().requires_grad_() for t in cpu]
    fast, slow = attention(*gpu, "sdpa", window=100), attention(*cpu, "sdpa", window=100)
    torch.testing.assert_close(fast.float().cpu(), slow, rtol=2e-2, atol=2e-2)
    fast.float().square().sum().backward()
    slow.square().sum().backward()
    for g, c in zip(gpu, cpu):
        torch.testing.assert_close(g.grad.float().cpu(), c.grad, rtol=5e-2, atol=5e-2)


@pytest.fixture
def fresh_faults():
    """The kernels' cached checks forgotten before and after (a test that patches what they see)."""
    from training.llama.flash4 import flash4_fault

    for check in (cudnn_window_fault, flash4_fault):
        check.cache_clear()
    yield
    for check in (cudnn_window_fault, flash4_fault):
        check.cache_clear()


def test_cudnns_banded_kernel_is_chosen_only_on_an_nvidia_gpu_where_it_matches(monkeypatch, fresh_faults):
    cpu = torch.device("cpu")
    assert cudnn_window_fault(cpu) == "not an NVIDIA GPU"
    assert choose_attention("auto", cpu, window=4096) == "sdpa"
    # an NVIDIA GPU without the package: the reason is named, and the suite's summary line says it
    import training.llama.attention as attention_module
    import training.llama.flash4 as flash4_module
    import training.throughput.llm as llm

    cudnn_window_fault.cache_clear()
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    for module in (attention_module, flash4_module):  # neither cuDNN's frontend nor flash-attn(-4) installed
        monkeypatch.setattr(module, "importable", lambda name: False)
    monkeypatch.setattr(llm, "TORCH_WINDOW_ATTENTION", object())
    gpu = torch.device("cuda")
    assert cudnn_window_fault(gpu) == "nvidia-cudnn-frontend is not installed"
    assert choose_attention("auto", gpu, window=4096) == "sdpa"
    assert llm.describe_attention("sdpa", 4096, gpu) == (
        "sdpa; sliding window 4096 through PyTorch's flash kernel (varlen_attn; "
        "not cuDNN's: nvidia-cudnn-frontend is not installed)"
    )
    assert "cuDNN's banded SDPA" in llm.describe_attention("cudnn", 4096, gpu)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="cuDNN needs a GPU")
def test_cudnns_banded_kernel_matches_the_band_mask_on_the_gpu():
    """Where nvidia-cudnn-frontend is installed on an NVIDIA GPU, its banded SDPA runs, matches the band mask
    forward and backward (`cudnn_window_fault`), and is what a windowed model picks."""
    from training.common.backends import importable

    if not importable("cudnn") or not torch.version.cuda:
        pytest.skip("nvidia-cudnn-frontend is not installed, or not an NVIDIA GPU")
    device = torch.device("cuda")
    assert cudnn_window_fault(device) == ""
    assert choose_attention("auto", device, window=4096) in ("cudnn", "flash_attn", "flash4")
