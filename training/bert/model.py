"""BERT for pretraining on packed rows.

A batch is `B` rows of `L` (512) tokens. Each row holds up to 3 sequences back to back, then padding.
`seq_ids[b, t]` numbers the sequences of a row 1, 2, 3 (0 = padding): attention never crosses a
sequence boundary, position ids restart at every sequence, NSP is predicted from each sequence's
[CLS] token, and the MLM head runs only on the masked positions (flat indices into `B * L`).

Parameter names follow Hugging Face's `BertForPreTraining` (the phase-1 checkpoint's converted names)
except that query/key/value are one fused `qkv` projection; `load_pretrained` does the mapping.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from training.bert import attention


@dataclass(frozen=True)
class BertShape:
    vocab_size: int = 30522
    hidden_size: int = 1024
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    intermediate_size: int = 4096
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12

    @classmethod
    def from_json(cls, path: Path) -> BertShape:
        """Read a Google/Hugging Face `bert_config.json`; `hidden_act` is checked, extra keys ignored."""
        raw = json.loads(Path(path).read_text())
        if raw.get("hidden_act", "gelu") not in ("gelu", "gelu_new"):
            raise ValueError(f"{path}: hidden_act {raw['hidden_act']!r} is not supported (gelu only)")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


@dataclass
class Batch:
    """One step's inputs for one rank; every tensor lives on the same device."""

    input_ids: torch.Tensor  # [B, L] int64
    segment_ids: torch.Tensor  # [B, L] int64
    position_ids: torch.Tensor  # [B, L] int64, restart at 0 for each sequence
    seq_ids: torch.Tensor  # [B, L] int32, 1..3 per sequence, 0 for padding
    cu_seqlens: torch.Tensor  # [S + 2] int32 over the flattened rows; padding runs are extra segments
    mlm_index: torch.Tensor  # [M] int64 flat positions of masked tokens
    mlm_labels: torch.Tensor  # [M] int64 original token ids (-100 = ignore, for static padding)
    cls_index: torch.Tensor  # [S] int64 flat positions of each sequence's [CLS]
    nsp_labels: torch.Tensor  # [S] int64 (-100 = ignore)
    num_sequences: int

    def to(self, device: torch.device, non_blocking: bool = True) -> Batch:
        moved = {
            k: (v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v)
            for k, v in self.__dict__.items()
        }
        return Batch(**moved)


class ResidualNorm(nn.LayerNorm):
    """A LayerNorm whose output is the residual stream: `out_dtype` (set by `set_residual_dtype`) stores it in
    bf16, as NVIDIA's half-precision BERT does, instead of autocast's float32; it is computed in float32."""

    out_dtype: torch.dtype | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y if self.out_dtype is None else y.to(self.out_dtype)


class Embeddings(nn.Module):
    def __init__(self, s: BertShape):
        super().__init__()
        self.word_embeddings = nn.Embedding(s.vocab_size, s.hidden_size)
        self.position_embeddings = nn.Embedding(s.max_position_embeddings, s.hidden_size)
        self.token_type_embeddings = nn.Embedding(s.type_vocab_size, s.hidden_size)
        self.LayerNorm = ResidualNorm(s.hidden_size, eps=s.layer_norm_eps)
        self.dropout = nn.Dropout(s.hidden_dropout_prob)

    def forward(self, b: Batch) -> torch.Tensor:
        x = (
            self.word_embeddings(b.input_ids)
            + self.position_embeddings(b.position_ids)
            + self.token_type_embeddings(b.segment_ids)
        )
        return self.dropout(self.LayerNorm(x))


class FeedForward(nn.Module):
    """The layer's MLP: down(gelu(up(x))). Its own module so that an FP8 backend can run it as one function
    (`training.fp8.MlpLayout(FeedForward, up="up", down="down")`)."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.up = nn.Linear(hidden, intermediate)
        self.down = nn.Linear(intermediate, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Layer(nn.Module):
    """Post-LayerNorm transformer encoder layer, as in BERT."""

    def __init__(self, s: BertShape, attn_impl: str):
        super().__init__()
        h = s.hidden_size
        self.heads, self.head_dim = s.num_attention_heads, h // s.num_attention_heads
        self.attn_impl = attn_impl
        self.attn_dropout = s.attention_probs_dropout_prob
        self.qkv = nn.Linear(h, 3 * h)
        self.attn_out = nn.Linear(h, h)
        self.attn_norm = ResidualNorm(h, eps=s.layer_norm_eps)
        self.ffn = FeedForward(h, s.intermediate_size)
        self.ffn_norm = ResidualNorm(h, eps=s.layer_norm_eps)
        self.dropout = nn.Dropout(s.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, b: Batch) -> torch.Tensor:
        B, L, H = x.shape
        qkv = self.qkv(x).view(B, L, 3, self.heads, self.head_dim)
        ctx = attention.packed_attention(
            self.attn_impl, qkv, b, dropout_p=self.attn_dropout if self.training else 0.0
        )
        x = self.attn_norm(x + self.dropout(self.attn_out(ctx.reshape(B, L, H))))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class BertForPackedPretraining(nn.Module):
    def __init__(self, s: BertShape, attn_impl: str = "sdpa"):
        super().__init__()
        self.shape = s
        self.embeddings = Embeddings(s)
        self.layers = nn.ModuleList(Layer(s, attn_impl) for _ in range(s.num_hidden_layers))
        self.pooler = nn.Linear(s.hidden_size, s.hidden_size)
        self.mlm_transform = nn.Linear(s.hidden_size, s.hidden_size)
        self.mlm_norm = nn.LayerNorm(s.hidden_size, eps=s.layer_norm_eps)
        self.mlm_bias = nn.Parameter(torch.zeros(s.vocab_size))
        self.nsp = nn.Linear(s.hidden_size, 2)
        self.apply(self._init_weights)

    def _init_weights(self, m: nn.Module) -> None:
        std = self.shape.initializer_range
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.trunc_normal_(m.weight, std=std, a=-2 * std, b=2 * std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def set_residual_dtype(self, dtype: torch.dtype | None) -> None:
        """Store the residual stream (the embedding's and the layers' LayerNorm outputs) in `dtype`; None
        keeps what the LayerNorm returns (float32 under autocast)."""
        for m in self.modules():
            if isinstance(m, ResidualNorm):
                m.out_dtype = dtype

    def forward(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (MLM logits [M, vocab], NSP logits [S, 2])."""
        x = self.embeddings(b)
        for layer in self.layers:
            x = layer(x, b)
        flat = x.view(-1, x.shape[-1])
        masked = self.mlm_norm(F.gelu(self.mlm_transform(flat.index_select(0, b.mlm_index))))
        mlm_logits = F.linear(masked, self.embeddings.word_embeddings.weight, self.mlm_bias)
        pooled = torch.tanh(self.pooler(flat.index_select(0, b.cls_index)))
        return mlm_logits, self.nsp(pooled)


def pretraining_loss(mlm_logits, nsp_logits, b: Batch) -> torch.Tensor:
    """MLM + NSP cross-entropy, each averaged over its labelled items (-100 = ignore)."""
    mlm = F.cross_entropy(mlm_logits.float(), b.mlm_labels, ignore_index=-100)
    nsp = F.cross_entropy(nsp_logits.float(), b.nsp_labels, ignore_index=-100)
    return mlm + nsp


# Hugging Face BertForPreTraining names -> ours (per-layer names use the layer prefix).
_TOP = {
    "bert.embeddings.word_embeddings.weight": "embeddings.word_embeddings.weight",
    "bert.embeddings.position_embeddings.weight": "embeddings.position_embeddings.weight",
    "bert.embeddings.token_type_embeddings.weight": "embeddings.token_type_embeddings.weight",
    "bert.embeddings.LayerNorm.weight": "embeddings.LayerNorm.weight",
    "bert.embeddings.LayerNorm.bias": "embeddings.LayerNorm.bias",
    "bert.pooler.dense.weight": "pooler.weight",
    "bert.pooler.dense.bias": "pooler.bias",
    "cls.predictions.transform.dense.weight": "mlm_transform.weight",
    "cls.predictions.transform.dense.bias": "mlm_transform.bias",
    "cls.predictions.transform.LayerNorm.weight": "mlm_norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "mlm_norm.bias",
    "cls.predictions.bias": "mlm_bias",
    "cls.seq_relationship.weight": "nsp.weight",
    "cls.seq_relationship.bias": "nsp.bias",
}
_LAYER = {
    "attention.output.dense": "attn_out",
    "attention.output.LayerNorm": "attn_norm",
    "intermediate.dense": "ffn.up",
    "output.dense": "ffn.down",
    "output.LayerNorm": "ffn_norm",
}


def from_hf_state_dict(hf: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """Map a Hugging Face-named BERT pretraining state dict to this module's names (q, k, v fused)."""
    out = {ours: hf[theirs] for theirs, ours in _TOP.items()}
    for i in range(num_layers):
        pre = f"bert.encoder.layer.{i}."
        for suffix in ("weight", "bias"):
            qkv = [hf[f"{pre}attention.self.{n}.{suffix}"] for n in ("query", "key", "value")]
            out[f"layers.{i}.qkv.{suffix}"] = torch.cat(qkv, 0)
            for theirs, ours in _LAYER.items():
                out[f"layers.{i}.{ours}.{suffix}"] = hf[f"{pre}{theirs}.{suffix}"]
    return out


def load_pretrained(model: BertForPackedPretraining, path: Path) -> int:
    """Load a converted phase-1 checkpoint (Hugging Face names); returns the number of tensors loaded."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = state.get("model", state)
    try:
        mapped = from_hf_state_dict(state, model.shape.num_hidden_layers)
    except KeyError as err:
        raise ValueError(f"{path}: checkpoint lacks tensor {err.args[0]}") from None
    # Checkpoints may pad the vocabulary (e.g. to a multiple of 8); keep the model's rows.
    for key in ("embeddings.word_embeddings.weight", "mlm_bias"):
        mapped[key] = mapped[key][: model.shape.vocab_size]
    model.load_state_dict(mapped, strict=True)
    return len(mapped)


def flops_per_step(s: BertShape, seq_lens: list[int], masked: int, seqs: int) -> float:
    """Model FLOPs (forward + backward = 3x forward) of one step, counting only real work: dense layers
    over the sequences' tokens (not padding), attention within each sequence, the MLM head on masked
    tokens, NSP per sequence."""
    h, f, n = s.hidden_size, s.intermediate_size, s.num_hidden_layers
    tokens = sum(seq_lens)
    dense = 2 * tokens * n * (4 * h * h + 2 * h * f)
    attn = 2 * n * sum(2 * length * length * h for length in seq_lens)
    heads = 2 * masked * (h * h + h * s.vocab_size) + 2 * seqs * (h * h + 2 * h)
    return 3.0 * (dense + attn + heads)
