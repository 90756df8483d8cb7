"""Llama (3.1 8B, and the shapes of its family) as one compact PyTorch module, and its loss.

Parameter names follow Hugging Face's `LlamaForCausalLM` without its `model.` prefix (`embed_tokens`,
`layers.N.self_attn.q_proj`, ..., `norm`, `lm_head`) and RoPE uses the same rotate-half layout, so a Hugging
Face checkpoint loads with `load_hf_state_dict` and nothing else (what Llama 2 70B LoRA starts from).

- Attention runs the kernel of the backend the model was built with (`training.llama.attention`: the kernels,
  the backend's choice and the checks behind it). Packed rows (several sequences in one row, attention kept
  inside each) pass `cu_seqlens` and `position_ids` restarting at each sequence; a shape's
  `sliding_window` (Mistral) limits what each token sees.
- Shapes come from `LlamaShape`; the tiny CPU default and the perf script reuse the same module.
- The constructor allocates but does not initialize (so it can be built on the meta device and sharded
  first); call `init_weights()` once the parameters live on their device.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from training.llama.attention import attention
from training.llama.fp8_attention import new_history


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3.1's frequency-dependent RoPE rescaling ("llama3" rope_type in Hugging Face configs)."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class LlamaShape:
    num_layers: int = 32
    hidden_size: int = 4096
    ffn_hidden_size: int = 14336
    num_heads: int = 32
    num_kv_heads: int = 8
    vocab_size: int = 128256
    max_seq_length: int = 8192
    rope_theta: float = 500000.0
    rope_scaling: RopeScaling | None = RopeScaling()
    norm_eps: float = 1e-5
    init_std: float = 0.02  # NeMo's Llama31Config; output projections use std / sqrt(2 * layers)
    sliding_window: int | None = None  # Mistral: attend to this many most recent tokens (itself included)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def replace(self, **changes) -> LlamaShape:
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def num_params(self, include_embedding: bool = True) -> int:
        h, kv = self.hidden_size, self.num_kv_heads * self.head_dim
        block = 2 * h * h + 2 * h * kv + 3 * h * self.ffn_hidden_size + 2 * h
        total = self.num_layers * block + h + self.vocab_size * h  # blocks, final norm, lm_head
        return total + (self.vocab_size * h if include_embedding else 0)

    def flops_per_token(self, seq_length: int) -> float:
        """Model FLOPs per trained token: 6 x (parameters without the embedding table, which is a lookup)
        + 6 x seq x hidden x layers for causal attention (QK^T and AV, fwd + bwd). For Llama 3.1 8B at
        8192 this is 51.47 GFLOP/token, 421.66 TFLOP per sample (NVIDIA: MODEL_TFLOP_PER_SAMPLE=421.59).
        With a sliding window w < seq the attention term counts the keys each query really sees, on average
        w - w^2 / (2 x seq) instead of seq / 2: 12 x that x hidden x layers."""
        attention = 6 * seq_length * self.hidden_size * self.num_layers
        if self.sliding_window is not None and self.sliding_window < seq_length:
            w = self.sliding_window
            attention = 12 * (w - w * w / (2 * seq_length)) * self.hidden_size * self.num_layers
        return 6 * self.num_params(include_embedding=False) + attention

    def lora_flops_per_token(self, seq_length: int, adapter_params: int = 0) -> float:
        """Model FLOPs per trained token of LoRA fine-tuning: the frozen base runs forward (2N) and the input
        gradients (2N) but no weight gradients, so 4 x N (without the embedding table), + 6 x seq x hidden x
        layers for causal attention (forward and backward, as `flops_per_token`), + 6 x the adapters'
        parameters. For Llama 2 70B at 8192 with rank 16: 2,518 TFLOP per sequence (NVIDIA's config states
        MODEL_TFLOP_PER_SAMPLE=2598 without its formula)."""
        n = self.num_params(include_embedding=False)
        return 4 * n + 6 * seq_length * self.hidden_size * self.num_layers + 6 * adapter_params

    def to_hf_config(self) -> dict:
        """The equivalent `transformers.LlamaConfig` arguments."""
        scaling = None
        if self.rope_scaling is not None:
            scaling = {"rope_type": "llama3", **dataclasses.asdict(self.rope_scaling)}
        return {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.ffn_hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "max_position_embeddings": self.max_seq_length,
            "rms_norm_eps": self.norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": scaling,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mlp_bias": False,
            "hidden_act": "silu",
            "initializer_range": self.init_std,
        }


PRESETS = {
    "8b": LlamaShape(),  # Llama 3.1 8B
    # Llama 2 70B (the LoRA benchmark's base model; MLPerf trains it at 8192)
    "70b": LlamaShape(
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=28672,
        num_heads=64,
        num_kv_heads=8,
        vocab_size=32000,
        rope_theta=10000.0,
        rope_scaling=None,
    ),
    "tiny": LlamaShape(
        num_layers=2,
        hidden_size=64,
        ffn_hidden_size=192,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=4096,
        max_seq_length=256,
    ),
}


def rope_frequencies(shape: LlamaShape, device=None) -> torch.Tensor:
    """Inverse frequencies (head_dim / 2,), with Llama 3.1's scaling: wavelengths longer than the original
    context / low_freq_factor are slowed by `factor`, shorter than context / high_freq_factor kept, and the
    band between interpolated smoothly."""
    dim = shape.head_dim
    inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
    s = shape.rope_scaling
    if s is None:
        return inv_freq
    wavelen = 2 * math.pi / inv_freq
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    scaled = torch.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (batch, seq, heads, head_dim); cos/sin: (batch or 1, seq, 1, head_dim), computed in float32 and
    applied in x's dtype (as Hugging Face does; no float32 copies of q and k kept for backward)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, shape: LlamaShape, backend: str):
        super().__init__()
        h, hd = shape.hidden_size, shape.head_dim
        self.head_dim, self.backend = hd, backend
        self.window = shape.sliding_window
        self.q_proj = nn.Linear(h, shape.num_heads * hd, bias=False)
        self.k_proj = nn.Linear(h, shape.num_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(h, shape.num_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(shape.num_heads * hd, h, bias=False)
        # Low-rank updates, None unless a LoRA step (training.lora) sets them: `qkv_adapter` maps the input to
        # a q|k|v-wide delta (one adapter for the three projections, as for a fused QKV layer), `o_adapter`
        # maps the attention output to a delta of o_proj's.
        self.qkv_adapter: nn.Module | None = None
        self.o_adapter: nn.Module | None = None
        # FP8 attention's amax history (its gradients' delayed scales); zeroed after materialization
        if backend == "cudnn_fp8":
            self.register_buffer("fp8_history", new_history(None), persistent=False)
        else:
            self.fp8_history = None

    def forward(self, x, cos, sin, cu_seqlens=None, max_seqlen=None):
        return self.output(self.attend(*self.project(x, cos, sin), cu_seqlens, max_seqlen))

    def project(self, x, cos, sin):
        """x (batch, seq, hidden) -> q, k, v (batch, seq, heads, head_dim), RoPE applied."""
        b, s, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.qkv_adapter is not None:
            dq, dk, dv = self.qkv_adapter(x).split([q.shape[-1], k.shape[-1], v.shape[-1]], dim=-1)
            q, k, v = q + dq, k + dk, v + dv
        # -1 heads: under tensor parallelism each rank holds a slice of the heads
        q = apply_rope(q.view(b, s, -1, self.head_dim), cos, sin)
        k = apply_rope(k.view(b, s, -1, self.head_dim), cos, sin)
        return q, k, v.view(b, s, -1, self.head_dim)

    def attend(self, q, k, v, cu_seqlens=None, max_seqlen=None):
        """The attention kernel on q, k, v (batch, seq, heads, head_dim): this layer's backend and window."""
        return attention(q, k, v, self.backend, cu_seqlens, max_seqlen, self.window, self.fp8_history)

    def output(self, out):
        """The attention's output (batch, seq, heads, head_dim) -> (batch, seq, hidden)."""
        out = out.flatten(2)
        y = self.o_proj(out)
        return y if self.o_adapter is None else y + self.o_adapter(out)


class MLP(nn.Module):
    def __init__(self, shape: LlamaShape):
        super().__init__()
        self.gate_proj = nn.Linear(shape.hidden_size, shape.ffn_hidden_size, bias=False)
        self.up_proj = nn.Linear(shape.hidden_size, shape.ffn_hidden_size, bias=False)
        self.down_proj = nn.Linear(shape.ffn_hidden_size, shape.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """One decoder block: attention and MLP, each after its RMSNorm, each added to the residual stream. Its
    forward is also offered in parts around the attention kernel (`project`, `self_attn.attend`,
    `after_attention`), which activation checkpointing recomputes apart (`training.llama.checkpointing`)."""

    def __init__(self, shape: LlamaShape, backend: str):
        super().__init__()
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.norm_eps)
        self.self_attn = Attention(shape, backend)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.norm_eps)
        self.mlp = MLP(shape)

    def forward(self, x, cos, sin, cu_seqlens=None, max_seqlen=None):
        out = self.self_attn.attend(*self.project(x, cos, sin), cu_seqlens, max_seqlen)
        return self.after_attention(x, out)

    def project(self, x, cos, sin):
        """The residual stream x -> the attention's q, k, v."""
        return self.self_attn.project(self.input_layernorm(x), cos, sin)

    def after_attention(self, x, out):
        """The attention kernel's output added to x, then the MLP's."""
        x = x + self.self_attn.output(out)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, shape: LlamaShape, attention_backend: str = "sdpa"):
        super().__init__()
        self.shape = shape
        self.embed_tokens = nn.Embedding(shape.vocab_size, shape.hidden_size)
        self.layers = nn.ModuleList(Block(shape, attention_backend) for _ in range(shape.num_layers))
        self.norm = RMSNorm(shape.hidden_size, shape.norm_eps)
        self.lm_head = nn.Linear(shape.hidden_size, shape.vocab_size, bias=False)

    def forward(
        self,
        tokens: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        max_seqlen: int | None = None,
    ) -> torch.Tensor:
        """tokens (batch, seq) -> logits (batch, seq, vocab). A pipeline stage (`parallel.apply_pp`) without
        the embedding takes hidden states instead of tokens; one without the head returns hidden states."""
        if position_ids is None:
            position_ids = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0)
        # recomputed each call (head_dim / 2 numbers): no buffer to re-materialize after meta init or to be
        # cast to bf16 by a dtype change
        freqs = position_ids.float().unsqueeze(-1) * rope_frequencies(self.shape, device=tokens.device)
        angles = torch.cat((freqs, freqs), dim=-1).unsqueeze(2)  # (batch, seq, 1, head_dim)
        cos, sin = angles.cos(), angles.sin()
        x = self.embed_tokens(tokens) if self.embed_tokens is not None else tokens
        for layer in self.layers:
            x = layer(x, cos, sin, cu_seqlens, max_seqlen)
        return self.lm_head(self.norm(x)) if self.lm_head is not None else x

    def init_weights(self) -> None:
        """Megatron/NeMo's from-scratch init (`init_weights`). Works on sharded (DTensor) params."""
        init_weights(self, self.shape)


@torch.no_grad()
def init_weights(module: nn.Module, shape: LlamaShape, prefix: str = "") -> None:
    """Megatron/NeMo's from-scratch init of `module`: the model, or one of its parts whose parameters are the
    model's under `prefix` (`"layers.3."` for block 3, `"norm."` for the final norm). N(0, std) everywhere,
    std / sqrt(2 * layers) for the projections that write into the residual stream, norms at 1. The numbers
    are drawn in the parameter order of a plain model of the shape (`canonical_names`), so a model whose
    features reordered its modules (the FP8 MLP swap), or one materialized part by part in that order, gets
    the same weights from the same seed; parameters a plain model does not have (LoRA's adapters) are left
    to their owner. Works on sharded (DTensor) parameters."""
    init_parameters(dict(module.named_parameters()), shape, prefix)


@torch.no_grad()
def init_parameters(params: dict[str, torch.Tensor], shape: LlamaShape, prefix: str = "") -> None:
    """`init_weights` on parameters given by their names in our model without `prefix` (another model's, such
    as Hugging Face's, mapped to ours: `perf/lib/peers.py` gives a peer the same weights this way)."""
    out_std = shape.init_std / math.sqrt(2 * shape.num_layers)
    for name in canonical_names(shape):
        param = params.get(name[len(prefix) :]) if name.startswith(prefix) else None
        if param is None:
            continue
        if name.endswith("norm.weight"):
            nn.init.ones_(param)
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            nn.init.normal_(param, mean=0.0, std=out_std)
        else:
            nn.init.normal_(param, mean=0.0, std=shape.init_std)


@functools.cache
def canonical_names(shape: LlamaShape) -> tuple[str, ...]:
    """The parameter names of a plain `Llama` of `shape`, in registration order (built on the meta device)."""
    with torch.device("meta"):
        return tuple(name for name, _ in Llama(shape).named_parameters())


def param_dtype(precision: str) -> torch.dtype:
    """The dtype a model computes in for a resolved PRECISION: bf16 for bf16 and fp8 (FP8 matmuls inside a
    bf16 model), else float32."""
    return torch.bfloat16 if precision in ("bf16", "fp8") else torch.float32


def load_hf_state_dict(model: Llama, state_dict: dict[str, torch.Tensor]) -> None:
    """Load a Hugging Face `LlamaForCausalLM` state dict (keys `model.*` and `lm_head.weight`)."""
    ours = {k.removeprefix("model."): v for k, v in state_dict.items() if "rotary_emb" not in k}
    model.load_state_dict(ours, strict=True)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Next-token loss in float32 (the logits of a bf16 model are upcast, as Megatron and HF do)."""
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction=reduction)


# The same, compiled (on first call): the upcast, log-softmax and their backward fuse into a few kernels that
# never write float32 logits. On an H100, output layer + loss fwd + bwd at 8192 tokens: 38.4 ms and 5.1 GiB
# peak against 52.4 ms and 13.9 GiB eager (`perf/parts.py llama-ce`).
compiled_cross_entropy = torch.compile(cross_entropy)
