"""Scoring of MLPerf Training logs with mlperf-logging's own checkers.

- `python -m training.scoring LOGDIR [--ruleset X] [--division D] [--rcp-table T] [--out DIR]`: score a
  folder of runs (score.score_logdir, report.write_summary).
- `python -m training.scoring.compliance LOGFILE [--ruleset X]`: compliance of one run
  (compliance.check_compliance).
- rules.py: each benchmark's ruleset, target and samples unit, and the mlperf-logging version (from
  training.benchmarks); rounds.py: the rounds and the ruleset guessed from run dates; division.py: closed or
  open, from the system description; rcp_tables.py: the RCP table the checker reads (rcp_history/).
"""
