"""Scoring of MLPerf Training logs with mlperf-logging's own checkers.

- `python -m training.scoring LOGDIR [--ruleset X] [--out DIR]`: score a folder of runs (score.score_logdir,
  report.write_summary).
- `python -m training.scoring.compliance LOGFILE [--ruleset X]`: compliance of one run
  (compliance.check_compliance).
- rules.py pins each benchmark's ruleset, target and samples unit, and the mlperf-logging version.
"""
