"""BERT's preflight: `check(environ) -> list[str]`, run by `python -m training.preflight` before the runs.

Seconds, not minutes: the config parses, its schedule has an evaluation before the run stops (else that alone
is said: `training.common.preflight.load_config`), its arithmetic fits the machine (DGXSYSTEM's NxGxB, nodes x
GPUs against the launcher, a whole global batch), its files exist, the first and last training shard open with
the trainer's own reader, there are enough shards for the ranks, the attention and FP8 backends asked for
exist here, and the node has the GPUs the config asks for. (The prepared data's integrity is checked by the
data verifier the benchmark table names, which the preflight runs next.)
"""

from __future__ import annotations

from collections.abc import Mapping

from training.common.preflight import check_gpus, load_config


def check(environ: Mapping[str, str]) -> list[str]:
    from training.bert import data
    from training.bert.config import BertConfig

    cfg, scale = load_config(BertConfig, environ)
    if cfg is None:
        return scale
    paths = cfg.paths()
    problems = [f"{name} {path} does not exist" for name, path in paths.items() if path and not path.exists()]
    if problems:
        return problems
    shards = data.list_shards(paths["train_dir"])
    for shard in {shards[0], shards[-1]}:
        try:
            data.read_rows(shard)
        except data.DataError as err:
            problems.append(str(err))
    problems += scale
    if len(shards) < cfg.world_size():
        problems.append(f"{len(shards)} shards in {paths['train_dir']} cannot feed {cfg.world_size()} ranks")
    from training.fp8 import backend_problems

    problems += backend_problems(cfg.requested_precision(), cfg.fp8_backend)
    return problems + check_gpus(cfg.gpus_per_node, cfg.is_cpu_demo)


def report() -> list[tuple[str, str]]:
    """What this benchmark would use on this machine, for the doctor."""
    from training.bert.attention import choose_attention

    try:
        attention = choose_attention("auto")
    except ValueError as err:
        attention = f"none ({err})"
    return [("attention (auto)", attention), ("optimizer", "LAMB, torch foreach (ours)")]
