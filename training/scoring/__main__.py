"""python -m training.scoring LOGDIR [--ruleset X] [--out DIR]

Scores the MLPerf logs in LOGDIR (time to train, olympic mean, RCP check and normalization), writes
summary.md, summary.json and eval_accuracy.png into LOGDIR (or --out) and prints the markdown.
Exit status: 0 when every run converged, 1 when one did not (the summary lists why), 2 when no summary was
written (no logs, or it could not be written: the error names the file).
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
        markdown = write_summary(summary, args.out or args.logdir)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(markdown, end="")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
