"""A tiny Llama 2 checkpoint saved by `transformers` (safetensors) and rows in the GovReport layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

CONFIG = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
}


def save_tiny_llama2(folder: Path, seed: int = 0, shards: int = 2) -> Path:
    """A random `LlamaForCausalLM` of `CONFIG`, saved the way the Hub holds Llama 2 (safetensors shards and an
    index when `shards` > 1)."""
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**CONFIG, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config)
    for p in model.parameters():  # a bit more than the default init, so that outputs differ visibly
        torch.nn.init.normal_(p, std=0.05)
    size = sum(p.numel() * 4 for p in model.parameters())
    max_shard = f"{size // shards // 1000 + 1}KB" if shards > 1 else "10GB"
    model.save_pretrained(folder, safe_serialization=True, max_shard_size=max_shard)
    return Path(folder)


def write_rows(path: Path, count: int, seq: int, vocab: int, seed: int, packed: bool = False) -> None:
    """`count` rows in the MLCommons layout: a prompt (loss_mask 0) then an answer (loss_mask 1) per sequence;
    with `packed`, two or three sequences per row (`seq_start_id` lists their starts)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        starts = [0]
        if packed:
            starts += sorted(
                rng.choice(np.arange(8, seq - 8), int(rng.integers(1, 3)), replace=False).tolist()
            )
        ids, mask = np.zeros(seq, np.int64), np.zeros(seq, np.int64)
        for a, b in zip(starts, [*starts[1:], seq]):
            first = int(rng.integers(0, vocab - 1))
            ids[a:b] = (first + np.arange(b - a)) % vocab  # a learnable sequence: counting up
            mask[a + (b - a) // 3 : b] = 1  # the last two thirds are the "summary"
        rows.append({"input_ids": ids.tolist(), "loss_mask": mask.tolist(), "seq_start_id": starts})
    array = np.empty(len(rows), dtype=object)
    array[:] = rows
    np.save(path, array, allow_pickle=True)


def make_datadir(root: Path, train: int = 32, valid: int = 6, seq: int = 64, packed: bool = True) -> Path:
    """DATADIR for the trainer: data/{train,validation}.npy and model/ (the tiny checkpoint)."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    write_rows(root / "data" / "train.npy", train, seq, CONFIG["vocab_size"], 1, packed)
    write_rows(root / "data" / "validation.npy", valid, seq, CONFIG["vocab_size"], 2, packed)
    save_tiny_llama2(root / "model")
    (root / "data" / "meta.json").write_text(
        json.dumps({"seq_length": seq, "vocab_size": CONFIG["vocab_size"]})
    )
    return root
