"""The one place that pins each benchmark's MLPerf facts: ruleset, quality target, samples unit, run count."""

from __future__ import annotations

import math
from dataclasses import dataclass

# The mlperf-logging release whose compliance and RCP checkers we run (requirements.txt pins the same).
MLPERF_LOGGING_VERSION = "4.1.68"


@dataclass(frozen=True)
class BenchmarkRules:
    name: str  # the log's submission_benchmark
    ruleset: str  # the last round that has this benchmark
    target: float  # official quality target on eval_accuracy
    higher_is_better: bool
    samples_key: (
        str  # eval_accuracy metadata key that counts samples to converge (what the RCP checker reads)
    )
    runs: int  # runs an official score needs

    def is_official_target(self, target: float) -> bool:
        return math.isclose(target, self.target, rel_tol=1e-9)


BENCHMARKS = {
    rules.name: rules
    for rules in (
        BenchmarkRules("bert", "5.0.0", 0.720, True, "epoch_num", 10),
        BenchmarkRules("llama31_8b", "5.1.0", 3.3, False, "samples_count", 10),
        BenchmarkRules("llama2_70b_lora", "5.1.0", 0.925, False, "samples_count", 10),
    )
}


def rules_for(benchmark: str | None, source: object = "") -> BenchmarkRules:
    """The rules of `benchmark`; `source` (a file or folder) names where it was read, for the error."""
    if benchmark not in BENCHMARKS:
        where = f"{source}: " if source else ""
        raise ValueError(f"{where}unknown submission_benchmark {benchmark!r}; known: {', '.join(BENCHMARKS)}")
    return BENCHMARKS[benchmark]
