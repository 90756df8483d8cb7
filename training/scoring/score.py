"""Score a folder of MLPerf runs the way MLCommons does: time to train, olympic mean, RCP normalization."""

from __future__ import annotations

from pathlib import Path

from .checkers import RcpResult, rcp_check
from .compliance import check_compliance
from .rules import rules_for
from .runs import find_logs, read_run


def olympic_mean(minutes: list[float | None]) -> tuple[float | None, str]:
    """Mean time to train, and how it was taken. Olympic: sort, drop the fastest and the slowest, where a run
    that did not converge (None) counts as the slowest, so with more than one there is no score.
    Under 3 runs there is nothing to drop: plain mean."""
    failed = sum(m is None for m in minutes)
    times = sorted(m for m in minutes if m is not None)
    if not minutes:
        return None, "no runs"
    if failed > 1:
        return None, f"no score: {failed} runs did not converge, olympic scoring drops at most 1"
    if len(minutes) < 3:
        if failed:
            return None, f"no score: a run did not converge and {len(minutes)} runs are too few to drop it"
        return sum(times) / len(times), f"plain mean of {len(times)} run(s): an olympic mean needs at least 3"
    kept = times[1:] if failed else times[1:-1]
    slowest = "the run that did not converge" if failed else "the slowest"
    return sum(kept) / len(kept), f"olympic mean of {len(minutes)} runs: the fastest and {slowest} dropped"


def score_logdir(logdir: Path, ruleset: str | None = None) -> dict:
    """Everything the summary reports, as one JSON-ready dict (see report.py for its rendering)."""
    logdir = Path(logdir)
    if not logdir.is_dir():
        raise ValueError(f"{logdir}: not a folder")
    logs = find_logs(logdir)
    if not logs:
        raise ValueError(f"{logdir}: no MLPerf logs (*.txt or *.log files with :::MLLOG lines)")
    runs = [read_run(path) for path in logs]
    benchmarks = sorted({run.benchmark for run in runs if run.benchmark})
    if len(benchmarks) != 1:
        found = ", ".join(benchmarks) or "none of them logs submission_benchmark"
        raise ValueError(f"{logdir}: need the logs of exactly one benchmark, found: {found}")
    rules = rules_for(benchmarks[0], logdir)
    ruleset = ruleset or rules.ruleset
    notes = []
    if ruleset != rules.ruleset:
        notes.append(f"Ruleset {ruleset} given (the default for {rules.name} is {rules.ruleset}).")

    rows = []
    for run in runs:
        target = rules.target if run.target_accuracy is None else run.target_accuracy
        compliant, messages = check_compliance(run.path, ruleset, write_report=False)
        rows.append(
            {
                "log": run.path.name,
                "status": run.status,
                "converged": run.converged,
                "minutes": run.minutes,
                "samples_to_converge": run.samples(rules.samples_key) if run.converged else None,
                "last_eval_accuracy": run.last_accuracy,
                "throughput": run.throughput,
                "global_batch_size": run.global_batch_size,
                "target_accuracy": target,
                "target_logged": run.target_accuracy is not None,
                "valid_mlperf": rules.is_official_target(target),
                "compliant": compliant,
                "compliance_messages": messages,
                "evals": [[metadata.get(rules.samples_key), value] for metadata, value in run.evals],
            }
        )
        if run.bad_lines:
            notes.append(f"{run.path.name}: {run.bad_lines} :::MLLOG line(s) are not valid JSON (ignored).")
        if run.converged and run.minutes is None:
            notes.append(f"{run.path.name}: run_stop without run_start: counted as not converged.")

    valid = all(row["valid_mlperf"] for row in rows)
    mean, mean_method = olympic_mean([run.minutes if run.converged else None for run in runs])
    if not valid:
        demo = sorted({row["target_accuracy"] for row in rows if not row["valid_mlperf"]})
        notes.insert(
            0,
            f"**NOT A VALID MLPerf RESULT**: runs use target_accuracy {demo}, "
            f"the official {rules.name} target is {rules.target}.",
        )
    if len(runs) < rules.runs:
        notes.append(f"{len(runs)} run(s): an official {rules.name} score needs {rules.runs}.")
    if not all(row["target_logged"] for row in rows):
        notes.append(
            f"Runs without a target_accuracy line are taken to use the official target {rules.target}."
        )
    failed = [f"{row['log']} ({row['status']})" for row in rows if not row["converged"]]
    if failed:
        notes.append(f"Not converged, counted as infinitely slow: {', '.join(failed)}.")
    noncompliant = [row["log"] for row in rows if not row["compliant"]]
    if noncompliant:
        notes.append(
            f"Fail the compliance checker (training_{ruleset}): {', '.join(noncompliant)}; MLCommons' result "
            "summarizer counts such runs as not converged. Details: python -m training.scoring.compliance LOG"
        )

    if not valid:
        rcp = RcpResult(None, "RCPs apply only to runs with the official target", 1.0)
    elif mean is None or len(runs) < 3:
        rcp = RcpResult(None, "needs an olympic mean: at least 3 runs, at most 1 not converged", 1.0)
    else:
        try:
            rcp = rcp_check(logs, ruleset)
        except Exception as e:  # the checker fails on inputs it does not expect; report it, keep the summary
            rcp = RcpResult(False, f"RCP checker error: {type(e).__name__}: {e}", 1.0)
    return {
        "logdir": str(logdir),
        "benchmark": rules.name,
        "ruleset": ruleset,
        "official_target": rules.target,
        "higher_is_better": rules.higher_is_better,
        "samples_key": rules.samples_key,
        "required_runs": rules.runs,
        "valid_mlperf": valid,
        "runs": rows,
        "mean_minutes": mean,
        "mean_method": mean_method,
        "rcp": {
            "passed": rcp.passed,
            "message": rcp.message,
            "normalization_factor": rcp.normalization_factor,
            "log": rcp.log,
        },
        "score_minutes": mean * rcp.normalization_factor if rcp.passed else None,
        "notes": notes,
        "ok": all(run.converged for run in runs),
    }
