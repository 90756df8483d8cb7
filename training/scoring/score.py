"""Score a folder of MLPerf runs the way MLCommons does: time to train, olympic mean, RCP normalization.

The summary says what it scored with and why: the division (division.py), the ruleset (given, or inferred
from the run dates: rounds.py) and the RCP table (rcp_tables.py). Like MLCommons' result summarizer, it
applies a scaling.json found beside the logs (the factor a submitter's RCP check wrote, which the published
score used) and runs no RCP check for open-division results."""

from __future__ import annotations

import json
from pathlib import Path

from training.common import outcome
from training.common.outcome import Outcome

from .checkers import RcpResult, rcp_check
from .compliance import RULES_ROOT, check_compliance
from .division import choose_division
from .rcp_tables import choose_table
from .rounds import choose_ruleset
from .rules import BENCHMARKS, rules_for
from .runs import INCOMPLETE, Run, find_logs, in_progress, read_run


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


def _benchmark_of(runs: list[Run], logdir: Path) -> str:
    """The one benchmark the logs are of: as they log it, else (every log damaged) as the launcher named
    them, <benchmark>_<system>_<i>.log."""
    found = sorted({run.benchmark for run in runs if isinstance(run.benchmark, str)})
    if not found:
        found = sorted({b for run in runs for b in BENCHMARKS if run.path.name.startswith(f"{b}_")})
    if len(found) != 1:
        raise ValueError(
            f"{logdir}: need the logs of exactly one benchmark, found: "
            f"{', '.join(found) or 'none of them logs submission_benchmark'}"
        )
    return found[0]


def _compliance(run: Run, ruleset: str) -> tuple[bool, list[str]]:
    """The compliance checker's verdict on one log; a checker that raises (on a log it cannot read) fails
    it."""
    try:
        return check_compliance(run.path, ruleset, write_report=False)
    except Exception as err:  # noqa: BLE001 - a damaged log must not stop the summary
        return False, [f"compliance checker error: {type(err).__name__}: {err}"]


def _first_error(messages: list[str]) -> str:
    """The compliance checker's first complaint, for the verdict column."""
    return next((m for m in messages if m.startswith(("ERROR", "WARNING", "compliance checker error"))), "")


def verdict(run: Run, compliant: bool, messages: list[str], ruleset: str, ended: Outcome | None) -> str:
    """Why a run counts as converged or not, in the words of the summary's verdict column. The log decides;
    where it says the run did not converge, the trainer's own outcome (`ended`) says why, if it wrote one.
    A log without an evaluation says so: there is no accuracy to compare with the target."""
    if run.damaged:
        why = f"damaged log: {'; '.join(run.problems[:3])}" + ("; ..." if len(run.problems) > 3 else "")
    elif not run.converged:
        why = "not converged" + ("" if run.status == INCOMPLETE else f" ({run.status})")
        why += "" if run.evals else ": no evaluation ran"
    elif run.minutes is None:
        return "not converged (run_stop without run_start)"
    elif not compliant:
        return f"fails the compliance checker (training_{ruleset}): {_first_error(messages)}"
    else:
        return "converged"
    if ended is None or ended.status == "converged":
        return why
    return ended.describe() + (f" ({why})" if run.damaged else "")


def _outcome(run: Run, notes: list[str]) -> Outcome | None:
    try:
        return outcome.read(run.path)
    except ValueError as err:
        notes.append(f"{err}: ignored.")
        return None


def read_scaling(logdir: Path) -> float | None:
    """The factor of a scaling.json beside the logs (mlperf-logging's RCP checker writes one), else None."""
    path = Path(logdir) / "scaling.json"
    if not path.exists():
        return None
    try:
        factor = json.loads(path.read_text()).get("scaling_factor")
    except (OSError, ValueError, AttributeError) as err:
        raise ValueError(f"{path}: not a scaling.json ({err})") from None
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
        raise ValueError(f"{path}: scaling_factor {factor!r} is not a positive number")
    return float(factor)


def score_logdir(
    logdir: Path, ruleset: str | None = None, division: str | None = None, rcp_table: str | None = None
) -> dict:
    """Everything the summary reports, as one JSON-ready dict (see report.py for its rendering). Runs count as
    MLCommons' result summarizer counts them: a run converged only when its log is whole, says `success`
    and passes the compliance checker; any other is listed with why, and olympic scoring drops at most one.
    `ruleset`, `division` and `rcp_table` are the command's --ruleset, --division and --rcp-table."""
    logdir = Path(logdir)
    if not logdir.is_dir():
        raise ValueError(f"{logdir}: not a folder")
    logs = find_logs(logdir)
    running = [path.name for path in logs if in_progress(path)]
    logs = [path for path in logs if path.name not in running]
    if not logs:
        if running:
            raise ValueError(f"{logdir}: no finished run: {', '.join(running)} still running")
        raise ValueError(f"{logdir}: no MLPerf logs (*.txt or *.log files with :::MLLOG lines)")
    runs = [read_run(path) for path in logs]
    rules = rules_for(_benchmark_of(runs, logdir), logdir)
    chosen = choose_ruleset(
        rules.name,
        rules.ruleset,
        ruleset,
        [run.run_start_ms for run in runs if run.run_start_ms is not None],
        [run.ruleset for run in runs if run.ruleset],
    )
    ruleset = chosen.ruleset
    if not (RULES_ROOT / f"training_{ruleset}").is_dir():
        raise ValueError(f"--ruleset {ruleset}: mlperf_logging has no training ruleset {ruleset!r}")
    side = choose_division(
        logdir, division, [r.submission["division"] for r in runs if "division" in r.submission]
    )
    table = choose_table(ruleset, rules.name, rcp_table)
    shipped = read_scaling(logdir)
    notes = []
    if running:
        notes.append(f"Still running, not counted: {', '.join(running)} (its launcher holds the log).")

    rows = []
    for run in runs:
        target = rules.target if run.target_accuracy is None else run.target_accuracy
        compliant, messages = _compliance(run, ruleset)
        ended = _outcome(run, notes)
        why = verdict(run, compliant, messages, ruleset, ended)
        rows.append(
            {
                "log": run.path.name,
                "status": run.status,
                "verdict": why,
                "converged": why == "converged",
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
                "problems": run.problems,
                "outcome": {"status": ended.status, "detail": ended.detail} if ended else None,
                "evals": [[metadata.get(rules.samples_key), value] for metadata, value in run.evals],
            }
        )
        if run.damaged:
            notes.append(f"{run.path.name}: {why}; counted as not converged.")

    valid = all(row["valid_mlperf"] for row in rows)
    mean, mean_method = olympic_mean(
        [run.minutes if row["converged"] else None for run, row in zip(runs, rows)]
    )
    if not valid:
        demo = sorted({row["target_accuracy"] for row in rows if not row["valid_mlperf"]})
        notes.insert(
            0,
            f"**NOT A VALID MLPerf RESULT**: runs use target_accuracy {demo}, "
            f"the official {rules.name} target is {rules.target}.",
        )
    if len(runs) != rules.runs:
        notes.append(
            f"{len(runs)} run(s): an official {rules.name} score needs exactly {rules.runs} (the "
            "package checker's count)."
        )
    if not all(row["target_logged"] for row in rows):
        notes.append(
            f"Runs without a target_accuracy line are taken to use the official target {rules.target}."
        )
    failed = [f"{row['log']} ({row['verdict']})" for row in rows if not row["converged"]]
    if failed:
        notes.append(f"Not converged, counted as infinitely slow: {', '.join(failed)}.")
    if any(not row["compliant"] for row in rows):
        notes.append(
            "MLCommons' result summarizer counts a run that fails the compliance checker as not "
            "converged. Details: python -m training.scoring.compliance LOG"
        )

    open_division = side.division == "open"
    if not valid:
        rcp = RcpResult(None, "RCPs apply only to runs with the official target", 1.0)
    elif open_division:
        rcp = RcpResult(
            None, "open division: MLCommons' result summarizer checks RCPs of closed results only", 1.0
        )
    elif mean is None or len(runs) < 3:
        rcp = RcpResult(None, "needs an olympic mean: at least 3 runs, at most 1 not converged", 1.0)
    else:
        try:
            rcp = rcp_check(
                logs, ruleset, damaged={run.path for run in runs if run.damaged}, table=table.path
            )
        except Exception as e:  # the checker fails on inputs it does not expect; report it, keep the summary
            rcp = RcpResult(False, f"RCP checker error: {type(e).__name__}: {e}", 1.0)
    official = (rcp.passed or (open_division and valid and mean is not None)) and len(runs) == rules.runs
    factor = rcp.normalization_factor if shipped is None else shipped
    with_rcp_factor = None
    if shipped is not None and rcp.passed is not None and shipped != rcp.normalization_factor:
        said = (
            f"scaling.json beside the logs says {shipped!r}, the RCP check with {table.name} "
            f"{rcp.normalization_factor!r}."
        )
        if official:
            with_rcp_factor = mean * rcp.normalization_factor
            said += (
                " The score applies scaling.json's, as MLCommons' result summarizer does (the published "
                "scores were so computed; a submitter's RCP check writes that file with the table of its "
                f"day). With the RCP check's factor: {with_rcp_factor:.6f} min."
            )
        notes.append(said)
    return {
        "logdir": str(logdir),
        "benchmark": rules.name,
        "ruleset": ruleset,
        "ruleset_source": chosen.why,
        "ruleset_guessed": chosen.guessed,
        "division": side.division,
        "division_source": side.why,
        "rcp_table": table.name,
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
        "scaling_json": shipped,
        "normalization_factor": factor,
        "normalization_source": "scaling.json beside the logs"
        if shipped is not None
        else ("none: no RCP check for open results" if open_division else "the RCP check"),
        "score_minutes": mean * factor if official else None,
        "score_minutes_with_rcp_factor": with_rcp_factor,
        "notes": notes,
        "running": running,
        "ok": all(row["converged"] for row in rows),
    }
