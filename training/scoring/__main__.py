"""python -m training.scoring LOGDIR [--ruleset X] [--out DIR]

Scores the MLPerf logs in LOGDIR (time to train, olympic mean, RCP check and normalization), writes
summary.md, summary.json and eval_accuracy.png into LOGDIR (or --out) and prints the markdown.
Exits 1 when a run failed or is incomplete, or when there are no logs.
"""

import argparse
import sys
from pathlib import Path

from .report import write_summary
from .score import score_logdir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.scoring",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "logdir", type=Path, help="folder of result_*.txt or <benchmark>_<system>_<i>.log files"
    )
    parser.add_argument("--ruleset", help="mlperf_logging ruleset, e.g. 4.1.0 (default: the benchmark's)")
    parser.add_argument("--out", type=Path, help="where the summary goes (default: LOGDIR)")
    args = parser.parse_args(argv)
    try:
        summary = score_logdir(args.logdir, args.ruleset)
    except ValueError as e:
        sys.exit(f"error: {e}")
    print(write_summary(summary, args.out or args.logdir), end="")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
