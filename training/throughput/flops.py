"""Model FLOPs per trained token in two accountings, both printed by every run, each named.

**Ours** (`LlamaShape.flops_per_token`, as the Llama 3.1 8B benchmark and `perf/bench_llama.py`):

    6 x N + 12 x hidden x layers x k

N: every parameter except the input embedding (a lookup, no FLOPs): the blocks' matrices and norms, the final
norm, the output layer. k: the keys each query attends to, on average: seq / 2 for causal attention (the
familiar 6 x seq x hidden x layers), w - w^2 / (2 x seq) with a sliding window w < seq (Mistral).
Llama 3.1 8B at 8192: 51.47 GFLOP per token.

**AMD's** (pytorch-training-benchmark, the code behind the seed's Llama 3.1 8B and Mistral 7B rows:
`LLaMAConfig.estimate_flops_per_token` in llama.py, `MistralConfig.estimate_flops_per_token` and
`calculate_mistral_tflops_training_per_device` in mistral.py), per token:

    3 x [ layers x 2 x (3 x hidden x ffn  +  hidden x (heads + 2 x kv_heads) x head_dim  +  hidden x heads x
          head_dim)  +  2 x hidden x vocab ]  +  3 x layers x 4 x min(window, seq) x heads x head_dim

that is 6 x (the blocks' matrices + the output layer; no norms, no input embedding) + attention counted as if
every query saw min(window, seq) keys: non-causal (a full seq for Llama, "megatron tflops calculation does not
account for causality in attention", as their comment says) and the whole window for Mistral. Llama 3.1 8B at
8192: 57.91 GFLOP per token, 1.125x ours; their TFLOP/s is this x tokens per GPU per second.
(AMD's 70B row ran torchtitan, whose own count is 6 x N + 12 x layers x heads x head_dim x seq, with N all
parameters less the embedding: the same non-causal attention; the difference in N is below 0.3% for 70B.)
"""

from __future__ import annotations

from training.llama.model import LlamaShape


def ours(shape: LlamaShape, seq: int) -> float:
    return shape.flops_per_token(seq)


def amd(shape: LlamaShape, seq: int) -> float:
    """AMD's count (above) for `shape` at sequence length `seq`."""
    h, ffn, layers = shape.hidden_size, shape.ffn_hidden_size, shape.num_layers
    heads, kv, d = shape.num_heads, shape.num_kv_heads, shape.head_dim
    matrices = layers * (3 * h * ffn + h * (heads + 2 * kv) * d + h * heads * d) + h * shape.vocab_size
    keys = min(shape.sliding_window or seq, seq)
    return 6 * matrices + 12 * layers * keys * heads * d


LLM_ACCOUNTINGS = {
    "ours": "ours: 6 x N without the input embedding + causal attention",
    "amd": "AMD's: 6 x matrices with the output layer + non-causal attention, windowed for Mistral",
}
FLUX_ACCOUNTINGS = {
    "ours": "ours: 3 x the forward's matrix products (each token through its stream's weights) + joint "
    "non-causal attention; AMD counts images/s only"
}


def flux(transformer: dict, image_tokens: int, text_tokens: int) -> float:
    """FLUX's model FLOPs per trained image: 3 x the forward's matrix products, counted from diffusers'
    `FluxTransformer2DModel` layout (D = heads x head_dim, I image and T text tokens, S = I + T):

    - a double-stream block: image and text tokens each through their own stream's q, k, v, output and
      4x MLP weights (12 D^2 per token: 2 x 12 D^2 x S), the two AdaLN modulations once per image
      (2 x 2 x 6 D^2), joint attention over S (4 S^2 D);
    - a single-stream block: q, k, v, the 4x MLP up and the projection out of their concatenation for every
      token (2 x 12 D^2 x S), its modulation once per image (2 x 3 D^2), attention 4 S^2 D;
    - the embedders: latents and T5 embeddings in (2 x in x D x I, 2 x joint x D x T), the time, guidance
      and pooled CLIP embedders and the final modulation per image, the latents out (2 x D x out x I).

    Counting N parameters x S tokens (as for a Llama) would put every token through both streams' weights
    and the per-image modulations: 1.8x this for FLUX.1-dev at 512 px (64.5 TFLOP per image).
    `tests/throughput/test_flops.py` checks this against torch's FLOP counter on a small model."""
    t = transformer
    d = t.get("num_attention_heads", 24) * t.get("attention_head_dim", 128)
    s = image_tokens + text_tokens
    channels_in = t.get("in_channels", 64)
    channels_out = t.get("patch_size", 1) ** 2 * (t.get("out_channels") or channels_in)
    double, single = t.get("num_layers", 19), t.get("num_single_layers", 38)
    attention = 4 * s * s * d
    blocks = double * (2 * 12 * d * d * s + 2 * 2 * 6 * d * d + attention)
    blocks += single * (2 * 12 * d * d * s + 2 * 3 * d * d + attention)
    embedders = 2 * channels_in * d * image_tokens + 2 * t.get("joint_attention_dim", 4096) * d * text_tokens
    embedders += 2 * d * channels_out * image_tokens + 2 * 2 * d * d  # latents out, final modulation
    per_image = 2 * (256 * d + d * d) + 2 * (t.get("pooled_projection_dim", 768) * d + d * d)  # time, CLIP
    if t.get("guidance_embeds", False):
        per_image += 2 * (256 * d + d * d)
    return 3 * (blocks + embedders + per_image)


def fmt(tflops: float) -> str:
    """A TFLOP/s figure for people: one decimal, three digits below 10 (the CPU's tiny runs)."""
    return f"{tflops:.1f}" if tflops >= 10 else f"{tflops:.3g}"
