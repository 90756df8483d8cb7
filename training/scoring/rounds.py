"""The MLPerf Training rounds of our benchmarks, and the ruleset of a folder of runs when no one names it.

MLPerf logs do not name their round. What they do carry: `submission_benchmark` (each benchmark was in some
rounds only) and the time of every `run_start`. A round publishes its results once, and no run published in a
round is dated after that day (true of all 335 public result sets of our benchmarks in rounds 3.1 to 5.1), so
the latest run of a folder gives the earliest round it can belong to: the first round of its benchmark
published on or after that day. That is a guess and is reported as one: a submitter may send old runs to a
later round (28 of those 335 sets are such re-submissions, most of them BERT runs of 2023 published again in
4.0 to 5.0). Runs newer than the last round of their benchmark listed here are new runs: they get the
benchmark's ruleset from `training.benchmarks`, which is no guess.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class Round:
    ruleset: str
    published: datetime.date  # the first commit of mlcommons/training_results_v<round>, below
    benchmarks: tuple[str, ...]  # ours, as that repository has results of them


# Publication: the first commit of each mlcommons/training_results_vX.Y repository (author date).
#   v3.0 9f08e30cbe2f 2023-06-19   v3.1 f33f94442050 2023-11-07   v4.0 62f111b7690f 2024-06-11
#   v4.1 8821c7037ffd 2024-11-13   v5.0 0fdc28f01325 2025-05-30   v5.1 4da2d1cd71eb 2025-11-05
# v6.0: the day MLCommons released the results, as AMD's two ROCm blogs on them ("Reproducing AMD MLPerf
#   Training v6.0 Submission Result", "Technical Dive") and the press are dated; its repository's first commit
#   could not be read. Its runs are dated 2026-05-10 to 2026-05-15 (their time_ms).
# v6.1: submissions closed 2026-10-16 (mlcommons/training's README); no published result set was found, so
#   its day is not known and it is not listed: runs after v6.0's day are new runs, under the latest ruleset.
ROUNDS = (
    Round("3.0.0", datetime.date(2023, 6, 19), ("bert",)),
    Round("3.1.0", datetime.date(2023, 11, 7), ("bert",)),
    Round("4.0.0", datetime.date(2024, 6, 11), ("bert", "llama2_70b_lora")),
    Round("4.1.0", datetime.date(2024, 11, 13), ("bert", "llama2_70b_lora")),
    Round("5.0.0", datetime.date(2025, 5, 30), ("bert", "llama2_70b_lora")),
    Round("5.1.0", datetime.date(2025, 11, 5), ("llama2_70b_lora", "llama31_8b")),
    Round("6.0.0", datetime.date(2026, 6, 16), ("llama2_70b_lora", "llama31_8b", "flux1")),
)
# Rounds of our benchmarks before the first listed above (their runs would be guessed as of that round).
UNLISTED_EARLIER = {"bert": "1.0 to 2.1"}


@dataclass(frozen=True)
class RulesetChoice:
    ruleset: str
    guessed: bool  # inferred from the run dates, which cannot tell a re-submission
    why: str


def run_day(time_ms: float) -> datetime.date:
    return datetime.datetime.fromtimestamp(time_ms / 1000, datetime.timezone.utc).date()


def choose_ruleset(
    benchmark: str,
    default: str,
    given: str | None,
    run_starts_ms: list[float],
    recorded: Collection[str] = (),
) -> RulesetChoice:
    """The ruleset to score with: `given` (--ruleset) when there is one, else the one our trainer recorded
    for the runs (`recorded`: MLPERF_RULESET, or the latest round, in each run's effective config), else
    inferred from the runs' dates (`run_starts_ms`, each run's run_start) among the rounds of `benchmark`;
    `default` is the benchmark's ruleset for new runs."""
    if given:
        return RulesetChoice(given, False, "given (--ruleset)")
    if len(set(recorded)) > 1:
        raise ValueError(
            f"the runs were made under different rulesets ({', '.join(sorted(set(recorded)))}): "
            "score each round's runs in a folder of their own, or pass --ruleset"
        )
    if recorded:
        ruleset = next(iter(recorded))
        return RulesetChoice(ruleset, False, "recorded by the runs' trainer (their effective config)")
    if not run_starts_ms:
        why = f"no run_start in the logs to date them: {benchmark}'s ruleset for new runs, assumed"
        return RulesetChoice(default, True, why + "; pass --ruleset if they are from an earlier round")
    last = run_day(max(run_starts_ms))
    rounds = [r for r in ROUNDS if benchmark in r.benchmarks]
    found = next((r for r in rounds if last <= r.published), None)
    if found is None:
        newest = rounds[-1] if rounds else None
        after = f", after {benchmark}'s last round here ({newest.ruleset[:3]}, published {newest.published})"
        return RulesetChoice(
            default,
            False,
            f"new runs (the last on {last}{after if newest else ''}): {benchmark}'s ruleset for new runs",
        )
    earlier = ""
    if found is rounds[0] and benchmark in UNLISTED_EARLIER:
        earlier = f" listed here ({benchmark} was in rounds {UNLISTED_EARLIER[benchmark]} too)"
    return RulesetChoice(
        found.ruleset,
        True,
        f"from the run dates: the last run is of {last}, and round {found.ruleset[:3]} (published "
        f"{found.published}) is the first round of {benchmark} after it{earlier}; runs sent again to a later "
        "round cannot be told apart: pass --ruleset to set it",
    )
