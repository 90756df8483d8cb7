"""The toy shapes of the benches' CPU smoke runs (`--tiny`), all one: a family's shape (Llama 3.1 8B's, Llama
2 70B's, a throughput row's config) at the depth, width and heads of the tiny Llama preset (`PRESETS["tiny"]`:
2 blocks, hidden 64, FFN 192, 4 query and 2 key/value heads), with the family's RoPE and, shortened to half
the sequence, its sliding window; the vocabulary and sequence are the bench's.
"""

from __future__ import annotations

import dataclasses

from training.llama.model import PRESETS, LlamaShape


def tiny(family: LlamaShape, vocab: int, seq: int) -> LlamaShape:
    """`family` at toy size: `vocab` tokens (the benches' text ids are taken modulo it), `seq` positions."""
    t = PRESETS["tiny"]
    window = family.sliding_window and min(family.sliding_window, seq // 2)
    return dataclasses.replace(
        family,
        num_layers=t.num_layers,
        hidden_size=t.hidden_size,
        ffn_hidden_size=t.ffn_hidden_size,
        num_heads=t.num_heads,
        num_kv_heads=t.num_kv_heads,
        vocab_size=vocab,
        max_seq_length=seq,
        sliding_window=window,
    )
