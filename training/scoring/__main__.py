"""python -m training.scoring LOGDIR [--ruleset X] [--division D] [--rcp-table T] [--out DIR]
                            [--package OUTDIR]

Scores the MLPerf logs in LOGDIR (time to train, olympic mean, RCP check and normalization), writes
summary.md, summary.json and eval_accuracy.png into LOGDIR (or --out) and prints the markdown.
The summary says which division, ruleset and RCP table it used, and why:
- division: --division, else the system description beside the logs in MLCommons' layout
  (<submitter>/systems/<system>.json for <submitter>/results/<system>/<benchmark>/), else the logs'
  submission_division. Open results get no RCP check, as in MLCommons' result summarizer.
- ruleset: --ruleset, else guessed from the run dates (the first round of the benchmark published on or
  after the last run; runs newer than its last round get the benchmark's ruleset for new runs).
- RCP table: mlperf-logging's own for the ruleset, else --rcp-table YYYY-MM-DD (the table as on
  mlcommons/logging master that day, from training/scoring/rcp_history) or --rcp-table FILE.
A scaling.json beside the logs is applied as the summarizer applies it; where the RCP check gives another
factor, the summary gives both scores.
Exit status: 0 when every run converged, 1 when one did not (the summary lists why), 2 when no summary was
written (no logs, or it could not be written: the error names the file).
A log still being written (its launcher holds a lock on it while the run lasts) is not counted, and said so.
One scoring of a folder at a time (the later waits); a summary already there that counts a run this scoring
does not (one that ended meanwhile) is kept, and said so.

--package OUTDIR also writes the runs' MLCommons submission tree into OUTDIR (new or empty; see package.py)
and runs mlperf-logging's package checker on it; the exit status is then its verdict: 0 accepted,
1 rejected (its messages say why), 2 when no package was written.
"""

import argparse
import sys
from pathlib import Path

from . import package
from .division import DIVISIONS
from .report import NewerSummary, scoring_lock, write_summary
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
    parser.add_argument("--ruleset", help="mlperf_logging ruleset, e.g. 4.1.0 (default: from the run dates)")
    parser.add_argument(
        "--division", choices=DIVISIONS, help="default: the system description, else the logs"
    )
    parser.add_argument(
        "--rcp-table", metavar="DATE|FILE", help="RCP table: as on that day (YYYY-MM-DD) or a file"
    )
    parser.add_argument("--out", type=Path, help="where the summary goes (default: LOGDIR)")
    parser.add_argument("--package", type=Path, metavar="OUTDIR", help="write and check the submission tree")
    args = parser.parse_args(argv)
    try:
        if args.package:
            package.refuse_nonempty(args.package)  # before the minutes of scoring
        with scoring_lock(args.logdir):
            summary = score_logdir(args.logdir, args.ruleset, args.division, args.rcp_table)
            markdown = write_summary(summary, args.out or args.logdir)
    except NewerSummary as e:
        print(f"training.scoring: {e}")
        return 0 if summary["ok"] else 1
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(markdown, end="")
    if not args.package:
        return 0 if summary["ok"] else 1
    return package_and_check(args.logdir, summary, args.package)


def package_and_check(logdir: Path, summary: dict, out: Path) -> int:
    from training import doctor  # imports torch: only for a package

    why = package.why_rejected(summary)
    if why:  # said first: the checker's verdict below is expected, and why
        print(
            f"\nNote: the package checker will reject this package: {why}. It is written anyway, to show "
            "the submission's layout."
        )
    try:
        root, unfilled = package.write_package(logdir, summary, out, dict(doctor.report([], [])))
        accepted, messages = package.check_package(root, summary["ruleset"])
        (out / "package_checker.log").write_text("\n".join(messages) + "\n")
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"\n## Package {root} (mlperf_logging package checker, training {summary['ruleset']})\n")
    print("\n".join(messages))
    if unfilled:
        print(f"\nSystem description fields to fill in by hand in {root}/systems/: {', '.join(unfilled)}.")
    if not accepted:
        print(f"error: the package checker rejects {out}: see its ERROR lines above", file=sys.stderr)
        return 1
    print(f"\nThe package checker accepts {out}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
