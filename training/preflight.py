"""`python -m training.preflight`: run once before the NEXP loop, inside the container.

Validates the sourced config for $BENCHMARK, checks that the prepared data is there and intact (the fast
form of the data pipeline's verify), that enough GPUs are visible, and prints the doctor report. Exits 1
with every problem named, so a typo or a missing shard fails in seconds rather than after init.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping

import torch

from training import doctor
from training.common.config import ConfigError

# benchmark -> module with `check(environ) -> list[str]`
CHECKS = {"bert": "training.preflight", "llama31_8b": "training.llama.preflight",
          "llama2_70b_lora": "training.llama.preflight"}  # fmt: skip


def check_gpus(wanted: int, cpu_demo: bool) -> list[str]:
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 0:
        return [] if cpu_demo else [f"no GPU visible, but the config asks for DGXNGPU={wanted}"]
    if visible < wanted:
        return [f"{visible} GPUs visible, but the config asks for DGXNGPU={wanted}"]
    return []


def launch_world_size(environ: Mapping[str, str]) -> int | None:
    """Ranks the launcher starts, where it says (run.sub: LAUNCH_WORLD_SIZE; torchrun: WORLD_SIZE)."""
    raw = environ.get("LAUNCH_WORLD_SIZE") or environ.get("WORLD_SIZE")
    return int(raw) if raw and raw.isdigit() else None


def check(environ: Mapping[str, str]) -> list[str]:
    """BERT: config, files, data integrity, GPUs."""
    from training.bert import data
    from training.bert.config import BertConfig

    try:
        cfg = BertConfig.from_env(environ, environ.get("CONFIG_VARS", "").split())
    except ConfigError as err:
        return [str(err)]
    paths = cfg.paths()
    problems = [f"{name} {path} does not exist" for name, path in paths.items() if path and not path.exists()]
    if problems:
        return problems
    if (cfg.datadir / "manifest.json").exists():
        from input_preprocessing.bert.verify import verify

        problems += verify(cfg.datadir, full=False)
    else:  # data prepared by another toolkit: at least open the first and last shard
        shards = data.list_shards(paths["train_dir"])
        for shard in {shards[0], shards[-1]}:
            try:
                data.read_rows(shard)
            except data.DataError as err:
                problems.append(str(err))
    problems += cfg.check_scale(launch_world_size(environ))
    shards = len(data.list_shards(paths["train_dir"]))
    if shards < cfg.world_size():
        problems.append(f"{shards} shards in {paths['train_dir']} cannot feed {cfg.world_size()} ranks")
    return problems + check_gpus(cfg.gpus_per_node, cfg.is_cpu_demo)


def main() -> int:
    benchmark = os.environ.get("BENCHMARK", "")
    if benchmark not in CHECKS:
        print(f"preflight: BENCHMARK={benchmark!r} is not one of {', '.join(CHECKS)}", file=sys.stderr)
        return 1
    doctor.main([os.environ.get("DATADIR", "."), os.environ.get("LOGDIR", ".")])
    try:
        problems = importlib.import_module(CHECKS[benchmark]).check(os.environ)
    except Exception as err:  # noqa: BLE001 - any failure here is a preflight failure, reported by name
        problems = [f"{type(err).__name__}: {err}"]
    for problem in problems:
        print(f"preflight: {problem}", file=sys.stderr)
    print(f"preflight: {benchmark} {'FAILED' if problems else 'OK'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
