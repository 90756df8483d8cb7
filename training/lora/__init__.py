"""LoRA adapters, applied by one function:

    apply_lora(model, LoraSettings(rank=16, alpha=32, dropout=0.1), device)  # or apply_lora(model, None)

The MLPerf Llama 2 70B recipe (NeMo's `LoRA(target_modules=["linear_qkv", "linear_proj"], dim=16, alpha=32,
dropout=0.1, dropout_position="pre", lora_A_init_method="kaiming")`, and the MLCommons reference's peft
`target_modules="qkv_proj,o_proj"` on a fused-QKV checkpoint): every attention block gets one adapter on
its fused q|k|v projection and one on its output projection, y += (alpha / rank) * B(A(dropout(x))), A
Kaiming-uniform, B zero (so a freshly wrapped model computes exactly what the base did), and everything else
is frozen. The Llama module offers the two slots (`Attention.qkv_adapter`, `Attention.o_adapter`) and imports
nothing from here; `merge_lora` folds trained adapters into the base weights.

Kept as our own code rather than `peft`'s: peft wraps `nn.Linear` modules one by one, so a fused q|k|v
adapter (one A shared by q, k and v, as NeMo and the reference train it) needs a fused QKV layer, which our
model and Hugging Face's checkpoints do not have; and peft's wrappers rename the base parameters
(`base_layer.weight`), which breaks loading the safetensors shards into the FSDP2-sharded model by name.
`tests/lora/test_lora.py` checks the adapter against peft's on the same weights.
"""

from training.lora.apply import (
    LoraAdapter,
    LoraSettings,
    apply_lora,
    attention_modules,
    fused,
    merge_lora,
    reset_lora,
)

__all__ = [
    "LoraAdapter",
    "LoraSettings",
    "apply_lora",
    "attention_modules",
    "fused",
    "merge_lora",
    "reset_lora",
]
