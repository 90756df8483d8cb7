"""Llama 3.1 8B's preflight: `check(environ) -> list[str]`, run by `python -m training.preflight`.

Seconds, not minutes: the config parses, its schedule has an evaluation before the run stops (else that alone
is said: `training.common.preflight.load_config`), its parallel layout fits DGXNNODES x DGXNGPU (and the
launcher's world size), the validation file holds the EVAL_SAMPLES sequences the evaluation reads, the index
cache folder is writable, FP8 has a backend, MODEL (when set) has the model's vocabulary, and the node has the
GPUs the config asks for. (The data files' structure is checked by the data verifier the benchmark table
names, which the preflight runs next.)
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from training.common.preflight import check_gpus, load_config


def check(environ: Mapping[str, str]) -> list[str]:
    from training.llama31_8b import data
    from training.llama31_8b.config import LlamaPretrainConfig

    cfg, problems = load_config(LlamaPretrainConfig, environ)
    if cfg is None:
        return problems
    paths = cfg.paths()
    if not cfg.datadir.is_dir():
        return [*problems, f"DATADIR {cfg.datadir} does not exist"]
    try:
        need = cfg.eval_samples * cfg.seq_length + 1
        have = data.validation_token_count(paths["valid"])
        if have < need:
            problems.append(
                f"{paths['valid']}: {have} tokens, fewer than the {need} that EVAL_SAMPLES="
                f"{cfg.eval_samples} sequences of SEQ_LENGTH={cfg.seq_length} need"
            )
    except data.DataError as err:
        problems.append(str(err))
    cache = paths["cache"]
    probe = cache if cache.exists() else cache.parent
    if not os.access(probe, os.W_OK):
        problems.append(f"INDEX_CACHE_DIR {cache} is not writable")
    from training.fp8 import backend_problems

    problems += backend_problems(cfg.requested_precision(), cfg.fp8_backend)
    problems += cfg.model_problems()
    return problems + check_gpus(cfg.gpus_per_node, cfg.is_cpu_demo)


def report() -> list[tuple[str, str]]:
    """What this benchmark would use on this machine, for the doctor."""
    import torch

    from training.fp8 import auto_backend
    from training.llama.attention import choose_attention

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    optimizer = (
        "AdamW: ours in Triton where it matches torch's fused"
        if device.type == "cuda"
        else ("AdamW: torch foreach")
    )
    return [
        ("attention (auto)", choose_attention("auto", device)),
        ("fp8 backend (auto)", auto_backend()),
        ("optimizer", optimizer),
    ]
