"""Preflight for the Llama benchmarks: `check(environ) -> list[str]`, called by `python -m training.preflight`

Seconds, not minutes: the config parses and its parallel layout fits DGXNNODES x DGXNGPU, the data files
exist by name and open, the validation file holds the EVAL_SAMPLES sequences the evaluation reads, the
index cache folder is writable, FP8 has a backend, and the node has the GPUs the config asks for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from training.common.config import ConfigError


def check(environ: Mapping[str, str]) -> list[str]:
    from training.llama import data
    from training.llama.config import LlamaPretrainConfig

    if environ.get("BENCHMARK", "llama31_8b") != "llama31_8b":
        return [f"BENCHMARK={environ['BENCHMARK']}: this trainer implements llama31_8b only so far"]
    try:
        cfg = LlamaPretrainConfig.from_env(environ, environ.get("CONFIG_VARS", "").split())
        cfg.check(cfg.world_size())
    except ConfigError as err:
        return [str(err)]
    problems = []
    paths = cfg.paths()
    if not cfg.datadir.is_dir():
        return [f"DATADIR {cfg.datadir} does not exist"]
    for name in ("train", "valid"):
        try:
            data.open_indexed(paths[name])
        except data.DataError as err:
            problems.append(str(err))
    if not problems:
        need = cfg.eval_samples * cfg.seq_length + 1
        have = data.validation_token_count(paths["valid"])
        if have < need:
            problems.append(
                f"{paths['valid']}: {have} tokens, fewer than the {need} that EVAL_SAMPLES="
                f"{cfg.eval_samples} sequences of SEQ_LENGTH={cfg.seq_length} need"
            )
    cache = paths["cache"]
    probe = cache if cache.exists() else cache.parent
    if not os.access(probe, os.W_OK):
        problems.append(f"INDEX_CACHE_DIR {cache} is not writable")
    if cfg.fp8:
        from training.common.fp8 import choose_fp8_backend

        try:
            choose_fp8_backend(cfg.fp8_backend)
        except ValueError as err:
            problems.append(str(err))
    from training.preflight import check_gpus

    return problems + check_gpus(cfg.gpus_per_node, cfg.is_cpu_demo)
