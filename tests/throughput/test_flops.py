"""The two TFLOP/s accountings against values worked out by hand, AMD's published table and which of its GPUs
a figure is set beside, the `--batch_size auto` extrapolation and the out-of-memory message."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.llama.model import PRESETS
from training.throughput import flops, published
from training.throughput.config import load_model
from training.throughput.run import does_not_fit, growth_per_item, largest_batch

LLAMA_8B = PRESETS["8b"]
MISTRAL = load_model(
    Path(__file__).resolve().parents[2] / "configs/throughput/mistral-7b-v0.1.json", "mistral"
).shape


def test_ours_per_token():
    # Llama 3.1 8B at 8192: N without the input embedding = 7,504,924,672 (blocks 32 x 218,112,000 with their
    # norms, final norm 4,096, output layer 525,336,576); attention 6 x 8192 x 4096 x 32 = 6,442,450,944
    assert flops.ours(LLAMA_8B, 8192) == 6 * 7_504_924_672 + 6_442_450_944 == 51_471_998_976
    # Mistral 7B at 8192, window 4096: N = 32 x 218,112,000 + 4,096 + 32000 x 4096 = 7,110,660,096; each query
    # sees 4096 - 4096^2 / (2 x 8192) = 3072 keys on average: 12 x 3072 x 4096 x 32 = 4,831,838,208
    assert flops.ours(MISTRAL, 8192) == 6 * 7_110_660_096 + 4_831_838_208 == 47_495_798_784
    # at 4096 the window covers the sequence: plain causal attention, 6 x 4096 x 4096 x 32
    assert flops.ours(MISTRAL, 4096) == 6 * 7_110_660_096 + 3_221_225_472


def test_amds_per_token():
    # AMD's matrices per layer: 3 x 4096 x 14336 + 4096 x (32 + 16) x 128 + 4096 x 32 x 128 = 218,103,808;
    # x 32 layers + 4096 x 128256 (output layer) = 7,504,658,432; attention 12 x 32 x 8192 x 32 x 128
    assert flops.amd(LLAMA_8B, 8192) == 6 * 7_504_658_432 + 12_884_901_888 == 57_912_852_480
    assert flops.amd(LLAMA_8B, 8192) / flops.ours(LLAMA_8B, 8192) == pytest.approx(1.1251, abs=1e-4)
    # Mistral: vocabulary 32000, attention over the whole window, 12 x 32 x 4096 x 4096
    assert flops.amd(MISTRAL, 8192) == 6 * (32 * 218_103_808 + 4096 * 32000) + 6_442_450_944


def test_published_rows_and_the_closest_gpu():
    row = published.lookup("MI300X", "Llama 3.1 8B", "fp8", 8192)
    assert (row.batch, row.value, row.config, row.model_type) == (3, 737.40, "llama-3.1-8b-8k.json", "llama")
    assert published.lookup("MI325X", "FLUX.1-dev", "bf16", None) is None
    assert published.reference_gpu("AMD Instinct MI325X", 256)[0] == "MI325X"
    gpu, why = published.reference_gpu("NVIDIA H200", 139.8)
    assert gpu == "MI300X" and "closest by peak BF16 rate and memory" in why
    assert published.reference_gpu("AMD Instinct MI355X", 288)[0] == "MI325X"
    assert published.reference_gpu("Mystery GPU", 250)[0] == "MI325X"
    assert published.reference_gpu("CPU", None) == (
        "MI300X",
        "MI300X, the table used without a GPU; --gpu picks another",
    )


def test_auto_batch_extrapolates_the_peak():
    # 20 GiB at batch 1, 30 at 2: 10 per sequence; 95 GiB usable -> 20 + 10 x (b - 1) <= 95 -> b = 8
    assert largest_batch(20.0, 10.0, 95.0) == 8
    assert largest_batch(20.0, 10.0, 15.0) == 1  # even batch 1 is over: the run itself will say so
    assert largest_batch(20.0, 0.0, 95.0, limit=64) == 2  # no growth seen: the largest batch that ran


def test_auto_batch_sees_activations_under_a_flat_peak():
    # FLUX.1 on an H200: the optimizer's peak (38.2 GiB) hid the activations at batch 1 and 2; the forward's
    # saved tensors still grow by 1.5 GiB per image -> 38.2 + 1.5 x (b - 1) <= 127.9 -> b = 60, not 1,024
    per_item = growth_per_item((38.2, 38.2), (2.0, 3.5))
    assert per_item == 1.5
    assert largest_batch(38.2, per_item, 127.9) == 60
    assert growth_per_item((20.0, 30.0), (5.0, 9.0)) == 10.0  # the peak's growth when it is the larger


def test_out_of_memory_names_the_batch_and_the_memory_asked_for():
    oom = "CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of 139.81 GiB"
    text = does_not_fit("Llama 3.1 70B", 4, "NVIDIA H200 (139.8 GiB, rank 0)", oom, 136.2)
    assert text.startswith("Llama 3.1 70B does not fit at batch size 4 per GPU on NVIDIA H200 (139.8 GiB")
    assert "asked for 3.91 GiB with 136.2 GiB already allocated" in text
    # PyTorch's own figures of the moment it failed, where its message has them (the 8B on 4 x H100)
    oom += (
        " of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB memory in "
        "use. Of the allocated memory 75.30 GiB is allocated by PyTorch, and 2.19 GiB is reserved by "
        "PyTorch but unallocated."
    )
    text = does_not_fit("Llama 3.1 8B", 1, "NVIDIA H100 80GB HBM3 (79.2 GiB, rank 0)", oom, 40.2)
    assert "asked for 3.91 GiB with 75.30 GiB allocated by PyTorch and 2.19 GiB reserved but" in text


def test_flux_flops_match_torchs_flop_counter():
    pytest.importorskip("diffusers", reason="FLUX's transformer is diffusers' FluxTransformer2DModel")
    import torch
    from diffusers import FluxTransformer2DModel
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    config = {
        "patch_size": 1,
        "in_channels": 16,
        "num_layers": 2,
        "num_single_layers": 3,
        "attention_head_dim": 16,
        "num_attention_heads": 4,
        "joint_attention_dim": 40,
        "pooled_projection_dim": 24,
        "guidance_embeds": True,
        "axes_dims_rope": [4, 6, 6],
    }
    image, text = 36, 12
    model = FluxTransformer2DModel(**config)
    inputs = dict(
        hidden_states=torch.randn(1, image, 16),
        encoder_hidden_states=torch.randn(1, text, 40),
        pooled_projections=torch.randn(1, 24),
        timestep=torch.rand(1),
        guidance=torch.ones(1),
        img_ids=torch.zeros(image, 3),
        txt_ids=torch.zeros(text, 3),
        return_dict=False,
    )
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), counter:
        model(**inputs)
    assert flops.flux(config, image, text) == 3 * counter.get_total_flops()
    # FLUX.1-dev at 512 px (1,024 latent + 512 text tokens): 64.51 TFLOP per image for all 57 blocks
    dev = load_model(Path(__file__).resolve().parents[2] / "configs/throughput/flux.1-dev.json", "flux").flux
    assert flops.flux(dev.transformer, 1024, 512) == pytest.approx(64.508e12, rel=1e-4)
