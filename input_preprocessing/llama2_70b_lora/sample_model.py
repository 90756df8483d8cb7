"""The CPU default's base model: a tiny Llama 2 (2 blocks, hidden 64) pretrained for a minute and a half on
the sample's training rows (plain language modelling of the articles' text; the summaries are not scored, so
that the fine-tuning has a task to learn), then saved as a Hugging Face checkpoint (`config.json` +
`model.safetensors`, Hugging Face's names) into OUTPUTDIR/model, so that the LoRA run fine-tunes a model that
knows the text, through the same loading path as the 70B's. Both files are recorded in `model/meta.json`
(size, sha256, sampled blocks), which the preflight checks them against, as it checks the data.

    python -m input_preprocessing.llama2_70b_lora.sample_model --outputdir /data/lora_demo [--steps 300]

It runs after `--sample` has written the rows and the tokenizer (prepare.py calls it). Seeded: the same
folder gives the same weights.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from input_preprocessing.common.runtime import PrepError, log
from input_preprocessing.llama2_70b_lora.model import SAMPLE_SOURCE, record_written

SHAPE = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
}


def make_base_model(
    outputdir: Path, steps: int = 300, batch: int = 8, lr: float = 3e-3, seed: int = 0
) -> dict:
    """Pretrain and save the tiny base; returns what was done (also written to model/base_model.json)."""
    from training.llama import optim
    from training.llama.checkpoint import hf_name, shape_from_hf_config
    from training.llama.model import Llama, cross_entropy

    data_dir, model_dir = outputdir / "data", outputdir / "model"
    meta_path = data_dir / "meta.json"
    if not meta_path.is_file():
        raise PrepError(f"{meta_path} is missing: make the sample's rows first (prepare_data.sh --sample)")
    meta = json.loads(meta_path.read_text())
    torch.set_num_threads(1)  # a tiny model: one thread is faster than two on a busy machine
    seq, vocab = meta["seq_length"], meta["vocab_size"]
    rows = np.load(data_dir / "train.npy", allow_pickle=True)
    ids = torch.tensor(np.stack([np.asarray(r["input_ids"], dtype=np.int64) for r in rows]))
    # the base learns the articles' text but never the task: the summaries' tokens (loss_mask 1) are not
    # scored, so that the fine-tuning has something to learn that carries over to held-out articles
    text = torch.tensor(np.stack([np.asarray(r["loss_mask"]) == 0 for r in rows]))
    model_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **SHAPE,
        "vocab_size": vocab,
        "max_position_embeddings": seq,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "torch_dtype": "float32",
        "bos_token_id": meta.get("bos_id"),
        "eos_token_id": meta.get("eos_id"),
    }
    (model_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    torch.manual_seed(seed)
    model = Llama(shape_from_hf_config(model_dir))  # the shape the trainer will read
    model.init_weights()
    optimizer, _ = optim.build_optimizer(model, lr, (0.9, 0.95), 1e-8, 0.01, fused=False)
    order = torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed))
    start, losses = time.perf_counter(), []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = optim.cosine_with_warmup(step, lr, 20, steps, lr / 10)
        pick = order[(step * batch + torch.arange(batch)) % len(ids)]
        labels = ids[pick, 1:].masked_fill(~text[pick, 1:], -100)
        loss = cross_entropy(model(ids[pick, :-1]), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if (step + 1) % max(steps // 5, 1) == 0:
            log(f"[base model] step {step + 1}/{steps}: loss {loss.item():.3f}")
    from safetensors.torch import save_file

    tensors = {hf_name(name): t.detach().contiguous() for name, t in model.state_dict().items()}
    save_file(tensors, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    seconds = round(time.perf_counter() - start, 1)
    done = {
        "steps": steps,
        "batch": batch,
        "seq_length": seq,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "seconds": seconds,
        "seed": seed,
    }
    (model_dir / "base_model.json").write_text(json.dumps(done, indent=2) + "\n")
    # what the trainer reads, recorded as downloads are: the preflight names a damaged file
    record_written(model_dir, ["config.json", "model.safetensors"], SAMPLE_SOURCE)
    log(f"[base model] {model_dir}: loss {losses[0]:.3f} -> {losses[-1]:.3f} in {done['seconds']} s")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m input_preprocessing.llama2_70b_lora.sample_model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--outputdir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)
    try:
        make_base_model(args.outputdir, args.steps)
    except PrepError as err:
        print(f"sample_model: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
