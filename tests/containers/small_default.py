"""The small default the real-launcher tests run: the shipped CPU config (configs/bert/config_CPU_1x1x*.sh)
with data from the real pipeline, or, in a checkout that does not ship it, tiny synthetic data with a config
of the same shape.

Either way the result is a config file named by the convention (config_<SYSTEM>_<N>x<G>x<B>.sh) and a DATADIR.
`derive` writes the config a test runs, for a node/GPU count, the way docs/custom_configs.md tells users to: a
file that sources the shipped one and overrides the scale, keeping the global batch. For the shipped config
it also shortens the schedule (quick_schedule): the launchers are under test here, not convergence (demo.sh
runs the full small default), and a full run takes minutes on 2 cores, which several runs per tier cannot fit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.cache import cached, tree_hash

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "configs" / "bert").glob("config_CPU_1x1x*.sh"))  # the small default, if shipped
SAMPLE = REPO / "input_preprocessing" / "bert" / "sample"

# The shape of the shipped CPU config (1 node x 1 "GPU"), on tests/bert/synthetic.py's tiny model:
# reaches its demo target at the first eval (80 samples), in about 15 s.
SYNTHETIC = """\
# Synthetic stand-in for the shipped configs/bert/config_CPU_1x1x*.sh (tests only).
export BENCHMARK=bert
DGXSYSTEM=$(basename "$(readlink -f "${BASH_SOURCE[0]}")" | sed 's/^config_//; s/\\.sh$//')
export DGXSYSTEM
export DGXNNODES=1 DGXNGPU=1 WALLTIME=10
export BATCHSIZE=8 LR=0.02 MAX_STEPS=200 INIT_CHECKPOINT=none CPU_DEMO=1
export EVAL_ITER_START_SAMPLES=80 EVAL_ITER_SAMPLES=80 MAX_SAMPLES_TERMINATION=320 TARGET_MLM_ACCURACY=0.001
export MLPERF_SUBMISSION_ORG=test MLPERF_SUBMISSION_PLATFORM=CPU
"""


def quick_schedule(config: Path, steps: int = 80) -> dict[str, str]:
    """The shipped config on a short schedule: evaluate after `steps` optimizer steps, against a target it
    reaches there (about 0.06 seen from 60 steps on, target 0.02), and stop by twice that (evaluations are
    scheduled below MAX_SAMPLES_TERMINATION only). About 20 s a run."""
    values = config_values(config)
    gbs = round(
        int(values["BATCHSIZE"])
        * int(values.get("GRADIENT_STEPS", 1))
        * float(values.get("PACKING_FACTOR", 2))
    )
    return {
        "EVAL_ITER_START_SAMPLES": str(steps * gbs),
        "EVAL_ITER_SAMPLES": str(steps * gbs),
        "MAX_SAMPLES_TERMINATION": str(2 * steps * gbs),
        "TARGET_MLM_ACCURACY": "0.02",
        "NUM_EVAL_EXAMPLES": "200",
        # one thread a run, also inside a container (which does not see the tests' environment): the tests run
        # in parallel workers, and two OpenMP threads on a core another process wants run many times slower
        "OMP_NUM_THREADS": "1",
    }


@dataclass(frozen=True)
class SmallDefault:
    config: Path
    datadir: Path
    shipped: bool  # the repo's own CPU config and prepared data, not the synthetic stand-in
    quick: tuple[tuple[str, str], ...] = ()  # overrides that shorten the schedule

    def derive(self, directory: Path, nodes: int, gpus: int, suffix: str = "", **overrides: str) -> Path:
        """A config for `nodes` x `gpus` that sources this one and keeps its global batch (BATCHSIZE split
        over the ranks where it divides), on the quick schedule; `overrides` are further exports."""
        batch = int(config_values(self.config)["BATCHSIZE"])
        ranks = nodes * gpus
        if batch % ranks == 0:
            batch //= ranks
        system = re.sub(r"_\d+x\d+x\d+.*$", "", self.config.stem.removeprefix("config_"))
        suffix = ("_quick" if self.quick else "") + suffix
        path = directory / f"config_{system}_{nodes}x{gpus}x{batch}{suffix}.sh"
        exports = {**dict(self.quick), **overrides}
        extra = "".join(f"export {name}={value}\n" for name, value in exports.items())
        path.write_text(
            f"# {path.name}: {self.config.name} on {nodes} node(s) x {gpus} GPU(s), same global batch.\n"
            f"source {self.config}\n"
            "# this file names itself, after the one it sources (as the shipped configs do)\n"
            'CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")\n'
            'DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)\n'
            "export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}\n"
            f"export DGXNNODES={nodes} DGXNGPU={gpus} BATCHSIZE={batch}\n{extra}"
        )
        return path


def config_values(config: Path) -> dict[str, str]:
    out = subprocess.run(
        ["bash", "-c", '. "$0" && env', str(config)],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def prepared_data() -> Path:
    """The bundled Wikipedia excerpt through prepare_data.sh (as demo.sh does: rows of the shipped config's
    MAX_SEQ_LENGTH), cached by its code's hash and that length (`tests.cache`)."""
    values = config_values(SHIPPED[0]) if SHIPPED else {}
    seq_len, predictions = values.get("MAX_SEQ_LENGTH", "512"), values.get("MAX_PREDICTIONS_PER_SEQ", "76")

    def build(out: Path) -> None:
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        subprocess.run(
            [
                str(REPO / "input_preprocessing" / "prepare_data.sh"),
                "--outputdir",
                str(out),
                "--packed-data",
                "--wiki-dump",
                str(SAMPLE / "enwiki_sample.xml.bz2"),
                "--vocab",
                str(SAMPLE / "bert_uncased_vocab.txt"),
                "--shards",
                "8",
                "--eval-samples",
                "2000",
                "--max-seq-length",
                seq_len,
                "--max-predictions-per-seq",
                predictions,
            ],
            check=True,
            env=env,
            cwd=REPO,
            capture_output=True,
        )

    return cached(f"bert_data-{tree_hash(REPO / 'input_preprocessing')}-seq{seq_len}", build)


def small_default(directory: Path) -> SmallDefault:
    """The small default; synthetic data (and config) go to `directory` when the repo does not ship it."""
    if SHIPPED:
        quick = tuple(quick_schedule(SHIPPED[0]).items())
        return SmallDefault(SHIPPED[0], prepared_data(), shipped=True, quick=quick)
    from tests.bert.synthetic import write_dataset

    data = directory / "bert_data"
    data.mkdir(parents=True)
    write_dataset(data, shards=8)
    config = directory / "config_CPU_1x1x8.sh"
    config.write_text(SYNTHETIC)
    return SmallDefault(config, data, shipped=False)
