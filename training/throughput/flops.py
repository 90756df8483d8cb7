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
FLUX_ACCOUNTINGS = {"ours": "ours: 6 x N + joint (non-causal) attention; AMD counts images/s only"}


def flux(transformer: dict, image_tokens: int, text_tokens: int, params: int) -> float:
    """FLUX's model FLOPs per image: 6 x N x (image + text tokens) + 12 x tokens^2 x heads x head_dim per
    block (joint attention over image and text, non-causal). AMD reports FLUX in images per second only."""
    tokens = image_tokens + text_tokens
    blocks = transformer.get("num_layers", 19) + transformer.get("num_single_layers", 38)
    width = transformer.get("num_attention_heads", 24) * transformer.get("attention_head_dim", 128)
    return 6 * params * tokens + 12 * tokens * tokens * width * blocks


def fmt(tflops: float) -> str:
    """A TFLOP/s figure for people: one decimal, three digits below 10 (the CPU's tiny runs)."""
    return f"{tflops:.1f}" if tflops >= 10 else f"{tflops:.3g}"
