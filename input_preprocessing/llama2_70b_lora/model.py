"""The Llama 2 70B weights from Hugging Face, kept as the repository's safetensors shards (no conversion).

`meta-llama/Llama-2-70b-hf` is gated: it needs HF_TOKEN from an account that accepted Meta's licence. Only the
safetensors shards, their index, config.json and the tokenizer files are fetched (about 138 GB; the repository
also holds the same weights as PyTorch `.bin` files, which are skipped). Each file is checked against the
Hub's size and LFS sha256 right after it arrives, and recorded in `model/meta.json`, so a re-run skips what
is done and resumes the file that was cut off.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from input_preprocessing.common.checksums import KEY, file_hash, sampled_sha256
from input_preprocessing.common.runtime import PrepError, Progress, log, write_json_atomic
from input_preprocessing.llama2_70b_lora import hub

REPO_ID = "meta-llama/Llama-2-70b-hf"
PATTERNS = (
    "*.safetensors",
    "model.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "LICENSE.txt",
    "USE_POLICY.md",
)
# config.json values the benchmark's model must have (MLPerf's Llama 2 70B: 80 layers, GQA with 8 KV heads)
SHAPE = {
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 80,
    "vocab_size": 32000,
}
META = "meta.json"
SAMPLE_SOURCE = "prepare_data.sh --sample"  # meta.json's source for the files the sample writes
MIB = 1 << 20


def hf_tensors(config: dict) -> dict[str, tuple[int, ...]]:
    """The tensors a Hugging Face Llama checkpoint with this config.json holds, name -> shape: what the
    trainer reads (`training.llama.checkpoint`), so that the preflight can check a checkpoint's safetensors
    headers in seconds instead of finding a missing or misshapen tensor minutes into loading it. Raises
    KeyError naming a missing config key."""
    hidden, ffn, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    block = {
        "input_layernorm.weight": (hidden,),
        "self_attn.q_proj.weight": (heads * head_dim, hidden),
        "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
        "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
        "self_attn.o_proj.weight": (hidden, heads * head_dim),
        "post_attention_layernorm.weight": (hidden,),
        "mlp.gate_proj.weight": (ffn, hidden),
        "mlp.up_proj.weight": (ffn, hidden),
        "mlp.down_proj.weight": (hidden, ffn),
    }
    tensors = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(config["num_hidden_layers"]):
        tensors.update({f"model.layers.{i}.{name}": shape for name, shape in block.items()})
    tensors["model.norm.weight"] = (hidden,)
    if not config.get("tie_word_embeddings", False):
        tensors["lm_head.weight"] = (vocab, hidden)
    return tensors


def record_written(model_dir: Path, names: list[str], source: str) -> dict:
    """Record files this toolkit wrote into `model_dir` (the sample's tokenizer and base model) in its
    meta.json as downloads are recorded: size, sha256 and sampled blocks, so that the preflight checks them
    as it checks the data. Entries of the same `source` are kept; another source's meta.json is replaced."""
    meta = read_meta(model_dir)
    if meta.get("source") != source:
        meta = {"source": source, "revision": None, "files": {}}
    for name in names:
        path = model_dir / name
        meta["files"][name] = {
            "size": path.stat().st_size,
            "sha256": file_hash(path, "sha256"),
            KEY: sampled_sha256(path),
        }
    write_json_atomic(model_dir / META, meta)
    return meta


def read_meta(model_dir: Path) -> dict:
    try:
        return json.loads((model_dir / META).read_text())
    except (OSError, ValueError):
        return {}


def remaining(model_dir: Path, revision: str, remote: list[hub.RemoteFile]) -> list[hub.RemoteFile]:
    """The files not yet downloaded and verified (recorded in meta.json for this revision, at full size)."""
    meta = read_meta(model_dir)
    done = meta.get("files", {}) if meta.get("revision") == revision else {}
    return [
        f
        for f in remote
        if not (
            done.get(f.name, {}).get("size") == f.size
            and (model_dir / f.name).is_file()
            and (model_dir / f.name).stat().st_size == f.size
        )
    ]


def prepare(model_dir: Path, revision: str, remote: list[hub.RemoteFile], token: str | None) -> dict:
    """Fetch and check every file of `remote` (`hub.list_files`' answer at commit `revision`) not yet done."""
    meta = read_meta(model_dir)
    if meta.get("revision") != revision:
        meta = {"source": f"hf://{REPO_ID}", "revision": revision, "files": {}}
    todo = remaining(model_dir, revision, remote)
    total = sum(f.size for f in remote)
    progress = Progress("model", total // MIB, "MiB")
    progress.advance((total - sum(f.size for f in todo)) // MIB)
    for i, f in enumerate(todo, 1):
        log(f"[model] {i}/{len(todo)}: {f.name} ({f.size / 2**30:.2f} GiB)")
        start = time.monotonic()
        path = hub.fetch(REPO_ID, "model", revision, f.name, model_dir, remote, token)
        if f.sha256:
            got = file_hash(path, "sha256")
            if got != f.sha256:
                path.unlink()
                raise PrepError(
                    f"{path}: checksum mismatch: sha256 {got}, the Hub says {f.sha256}; removed, run again"
                )
        # the Hub gives LFS files' sha256; the small files' (config, tokenizer) is taken here, as they arrive
        sha256 = f.sha256 or file_hash(path, "sha256")
        meta["files"][f.name] = {"size": f.size, "sha256": sha256, KEY: sampled_sha256(path)}
        write_json_atomic(model_dir / META, meta)
        seconds = time.monotonic() - start
        log(f"[model] {f.name}: verified, {f.size / MIB / max(seconds, 1e-3):.0f} MiB/s")
        progress.advance(f.size // MIB)
    shutil.rmtree(model_dir / ".cache", ignore_errors=True)  # huggingface_hub's resume records
    return meta
