"""Llama 2 70B LoRA's preflight: `check(environ) -> list[str]`, run by `python -m training.preflight`.

Seconds, not minutes: the config parses and its schedule has an evaluation before MAX_STEPS (else that alone
is said: `training.common.preflight.load_config`); a model folder holding a NeMo checkpoint (AMD's or
NVIDIA's) instead of Hugging Face safetensors is one line naming the command that gets them, and nothing else
is checked; the layout fits DGXNNODES x DGXNGPU (and the launcher's world size), the data files and the
checkpoint's config.json are where the config says, the checkpoint's shape is a Llama's, FP8 has a backend,
and the node has the GPUs the config asks for. (The rows and the checkpoint's files are checked by the data
verifier the benchmark table names, which the preflight runs next.)
"""

from __future__ import annotations

from collections.abc import Mapping

from training.common.preflight import check_gpus, load_config
from training.llama2_70b_lora.folders import nemo_checkpoint_problem


def check(environ: Mapping[str, str]) -> list[str]:
    from training.llama.checkpoint import CheckpointError
    from training.llama2_70b_lora.config import LoraConfig

    cfg, problems = load_config(LoraConfig, environ)
    if cfg is None:
        return problems
    paths = cfg.paths()
    nemo = nemo_checkpoint_problem(paths["model"]) if cfg.init_checkpoint == "model" else None
    if nemo:
        return [nemo]  # before anything else: the one thing to do
    problems += [
        f"{name} data {paths[name]} does not exist"
        for name in ("train", "valid")
        if not paths[name].is_file()
    ]
    if cfg.init_checkpoint == "model":
        if not (paths["model"] / "config.json").is_file():
            problems.append(f"MODEL {paths['model']} has no config.json (a Hugging Face Llama checkpoint)")
        else:
            try:
                shape = cfg.model_shape()
                if shape.hidden_size % shape.num_heads:
                    problems.append(f"{paths['model']}/config.json: heads do not divide the hidden size")
            except CheckpointError as err:
                problems.append(str(err))
    from training.fp8 import backend_problems

    problems += backend_problems(cfg.requested_precision(), cfg.fp8_backend)
    return problems + check_gpus(cfg.gpus_per_node, cfg.is_cpu_demo)


def report() -> list[tuple[str, str]]:
    """What this benchmark would use on this machine, for the doctor."""
    import torch

    from training.fp8 import auto_backend
    from training.llama.attention import choose_attention

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    attention = choose_attention("auto", device)
    packed = {"flash4": "FlashAttention-4's varlen kernel", "flash_attn": "flash-attn's varlen kernel"}.get(
        attention,
        "PyTorch's varlen flash kernel"
        if torch.version.cuda and device.type == "cuda"
        else "one SDPA call per sequence",
    )
    return [("attention (auto)", attention), ("packed rows", packed), ("fp8 backend (auto)", auto_backend())]
