"""The scorer's view of the benchmark table (`training.benchmarks`, where each benchmark's ruleset, target,
samples unit and run count are defined)."""

from __future__ import annotations

from training.benchmarks import BENCHMARKS, MLPERF_LOGGING_VERSION
from training.benchmarks import Benchmark as BenchmarkRules

__all__ = ["BENCHMARKS", "MLPERF_LOGGING_VERSION", "BenchmarkRules", "rules_for"]


def rules_for(benchmark: str | None, source: object = "") -> BenchmarkRules:
    """The rules of `benchmark`; `source` (a file or folder) names where it was read, for the error."""
    if benchmark not in BENCHMARKS:
        where = f"{source}: " if source else ""
        raise ValueError(f"{where}unknown submission_benchmark {benchmark!r}; known: {', '.join(BENCHMARKS)}")
    return BENCHMARKS[benchmark]
