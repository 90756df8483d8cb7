"""The benchmarks this toolkit runs: one table, read by the launchers (`run_and_time.sh`, `prepare_data.sh`
through this module's command line), the preflight, the doctor and the scorer. A new benchmark is one row
here and one package beside `training/bert/`, with the same file roles: `config.py` (the environment read
once into a typed config), `preflight.py`, `data.py`, the model (`model.py`), its build (`build.py`) and its
step (`step.py`), the entry point (`train.py`) and a README. The two Llama benchmarks share the model, build
and step of their family (`training/llama/`), which their configs' `run_spec()` describe the run to.

The rows name packages and modules as strings: nothing here imports a benchmark.

    python -m training.benchmarks                      # the table
    python -m training.benchmarks get NAME FIELD       # one field, for shell scripts (entry, prepare, ...)
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from dataclasses import dataclass

# The mlperf-logging release whose compliance, RCP and package checkers we run (requirements.txt pins it too).
MLPERF_LOGGING_VERSION = "4.1.68"


@dataclass(frozen=True)
class Benchmark:
    name: str  # MLPerf's `submission_benchmark`, and BENCHMARK in the configs
    title: str
    package: str  # the Python package: config, preflight, data, (model, build, step,) train
    rulesets: tuple[str, ...]  # the MLPerf Training rounds that have this benchmark, oldest first
    target: float  # the official quality target on `eval_accuracy`
    higher_is_better: bool
    samples_key: str  # eval_accuracy metadata key counting samples to converge (the RCP checker reads it)
    runs: int  # runs an official score needs
    data_verifier: str  # `python -m <this> DATADIR`: the fast check of the prepared data (exit 0: fine)
    prepare: str  # the data preparation script, relative to the repository root
    # what `prepare_data.sh --outputdir DIR` takes besides (training.prepare_hint writes the command): for the
    # full data, for the CPU-sized sample of the CPU_DEMO configs, and the folder of DIR that DATADIR is
    prepare_flags: str = ""
    sample_flags: str = "--sample"
    datadir_in_output: str = ""

    @property
    def ruleset(self) -> str:
        """The ruleset of new runs: the latest round of this benchmark (MLPERF_RULESET picks another)."""
        return self.rulesets[-1]

    def ruleset_problem(self, ruleset: str) -> str | None:
        """Why `ruleset` cannot score this benchmark, naming the rounds that can; None if it can."""
        if ruleset in self.rulesets:
            return None
        return f"{self.name} is in rounds {', '.join(self.rulesets)}, not {ruleset}"

    @property
    def entry(self) -> str:
        """The trainer's module, started by `torchrun -m`."""
        return f"{self.package}.train"

    @property
    def preflight(self) -> str:
        """The module whose `check(environ) -> list[str]` the preflight runs."""
        return f"{self.package}.preflight"

    def is_official_target(self, target: float) -> bool:
        return math.isclose(target, self.target, rel_tol=1e-9)


# BERT's rounds with the rules of phase 2 on packed data, as mlperf-logging ships them; 5.0 was its last.
BERT_ROUNDS = ("3.0.0", "3.1.0", "4.0.0", "4.1.0", "5.0.0")

BENCHMARKS = {
    b.name: b
    for b in (
        Benchmark(
            "bert",
            "BERT-Large phase 2 (packed Wikipedia)",
            "training.bert",
            BERT_ROUNDS,
            0.720,
            True,
            "epoch_num",
            10,
            "input_preprocessing.bert.verify",
            "input_preprocessing/bert/prepare_data.sh",
            prepare_flags="--packed-data",
            sample_flags="--packed-data --wiki-dump input_preprocessing/bert/sample/enwiki_sample.xml.bz2 "
            "--vocab input_preprocessing/bert/sample/bert_uncased_vocab.txt --shards 8 --eval-samples 500 "
            "--max-seq-length 128 --max-predictions-per-seq 20",
        ),
        Benchmark(
            "llama31_8b",
            "Llama 3.1 8B pretraining (C4)",
            "training.llama31_8b",
            ("5.1.0", "6.0.0", "6.1.0"),
            3.3,
            False,
            "samples_count",
            10,
            "input_preprocessing.llama31_8b.verify",
            "input_preprocessing/llama31_8b/prepare_data.sh",
            datadir_in_output="data",
        ),
        Benchmark(
            "llama2_70b_lora",
            "Llama 2 70B LoRA fine-tuning (GovReport)",
            "training.llama2_70b_lora",
            ("4.0.0", "4.1.0", "5.0.0", "5.1.0", "6.0.0", "6.1.0"),
            0.925,
            False,
            "samples_count",
            10,
            "input_preprocessing.llama2_70b_lora.verify",
            "input_preprocessing/llama2_70b_lora/prepare_data.sh",
            sample_flags="--sample --seq-len 256",
        ),
        Benchmark(
            "flux1",
            "Flux.1-schnell text-to-image pretraining (CC12M)",
            "training.flux1",
            ("6.0.0", "6.1.0"),
            0.586,
            False,
            "samples_count",
            10,
            "input_preprocessing.flux1.verify",
            "input_preprocessing/flux1/prepare_data.sh",
        ),
    )
}


def runnable(name: str | None, source: object = "BENCHMARK") -> Benchmark:
    """The benchmark called `name`, which must have a trainer here."""
    if name not in BENCHMARKS:
        raise ValueError(f"{source}={name} is not one of {', '.join(BENCHMARKS)}")
    return BENCHMARKS[name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("get", help="print one field of one benchmark")
    one.add_argument("name")
    one.add_argument("field", help="name, package, ruleset, target, prepare, ... or entry, preflight")
    args = parser.parse_args(argv)
    if args.command == "get":
        try:
            bench = runnable(args.name)
        except ValueError as err:
            print(f"training.benchmarks: {err}", file=sys.stderr)
            return 2
        fields = {f.name for f in dataclasses.fields(Benchmark)} | {"entry", "preflight", "ruleset"}
        if args.field not in fields:
            print(
                f"training.benchmarks: no field {args.field!r}; fields: {', '.join(sorted(fields))}",
                file=sys.stderr,
            )
            return 2
        print(getattr(bench, args.field))
        return 0
    for b in BENCHMARKS.values():
        op = ">=" if b.higher_is_better else "<="
        rounds = f"rulesets {b.rulesets[0]} to {b.ruleset}, new runs {b.ruleset}"
        print(f"{b.name:<16} {b.title}: eval_accuracy {op} {b.target} ({rounds}), {b.package}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
