"""Render a score summary (score.score_logdir's dict) as summary.md, summary.json and eval_accuracy.png."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from training.common.console import METRICS


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def to_markdown(summary: dict) -> str:
    s = summary
    better = "higher" if s["higher_is_better"] else "lower"
    lines = [f"# MLPerf Training score: {s['benchmark']}, {len(s['runs'])} run(s) in {s['logdir']}", ""]
    if not s["valid_mlperf"]:
        lines += ["> **NOT A VALID MLPerf RESULT**: demo target accuracy, see the notes.", ""]
    lines += [
        f"| run | verdict | minutes | samples ({s['samples_key']}) | last eval_accuracy "
        "| throughput (samples/s) | compliance |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for run in s["runs"]:
        verdict = run["verdict"].replace("|", "\\|")  # a | of a checker's message would split the cell
        lines.append(
            f"| {run['log']} | {verdict} | {_fmt(run['minutes'], '.4f')}"
            f" | {_fmt(run['samples_to_converge'], '.10g')}"
            f" | {_fmt(run['last_eval_accuracy'], '.4f')} | {_fmt(run['throughput'], '.5g')}"
            f" | {'ok' if run['compliant'] else 'FAILED'} |"
        )
    rcp = s["rcp"]
    rcp_status = {True: "PASSED", False: "FAILED", None: "skipped"}[rcp["passed"]]
    score = s["score_minutes"]
    guessed = " (**guessed**)" if s["ruleset_guessed"] else ""
    unused = " (not used: open division)" if s["division"] == "open" else ""
    demo = sorted({r["target_accuracy"] for r in s["runs"]} - {s["official_target"], None})
    target = f"target eval_accuracy {s['official_target']}"
    if demo:  # the runs' own target, above their figures; MLPerf's beside it
        target = (
            f"these runs' target eval_accuracy {', '.join(map(str, demo))} (a demo's; MLPerf's is "
            f"{s['official_target']})"
        )
    lines += [
        "",
        "## Score",
        "",
        f"- division {s['division']}: {s['division_source']}",
        f"- ruleset {s['ruleset']}{guessed}: {s['ruleset_source']}",
        f"- RCP table{unused}: {s['rcp_table']}",
        f"- {target} ({better} is better); an official score needs {s['required_runs']} runs",
        f"- mean time to train: {_fmt(s['mean_minutes'], '.6f')} min ({s['mean_method']})",
        f"- RCP check: {rcp_status} ({rcp['message']}), "
        f"normalization factor {rcp['normalization_factor']:.6f}",
        f"- normalization applied: {s['normalization_factor']:.6f} ({s['normalization_source']})",
        f"- **score: {_fmt(score, '.6f')} min**" + ("" if score is not None else " (no valid MLPerf score)"),
    ]
    if s["notes"]:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in s["notes"]]
    return "\n".join(lines) + "\n"


def plot_eval_accuracy(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for run in summary["runs"]:
        points = [(x, y) for x, y in run["evals"] if x is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker=".", label=run["log"])
    targets = {run["target_accuracy"] for run in summary["runs"]}
    # Demo runs only: the official target's line would flatten their curves at the bottom; the title names it.
    demo_only = bool(targets) and summary["official_target"] not in targets and None not in targets
    if not demo_only:
        targets.add(summary["official_target"])
    for target in sorted(targets):
        official = target == summary["official_target"]
        ax.axhline(
            target,
            color="k" if official else "r",
            ls="--",
            label=f"{'' if official else 'demo '}target {target}",
        )
    metric = METRICS.get(summary["benchmark"], "eval_accuracy")
    ax.set(
        xlabel=f"samples ({summary['samples_key']})",
        ylabel=f"{metric} (eval_accuracy)",
        title=f"{summary['benchmark']}: {metric} per run"
        + (f" (MLPerf's target {summary['official_target']} is off this scale)" if demo_only else ""),
    )
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


class NewerSummary(Exception):
    """The summary in the folder counts a run that the one to be written does not: it is kept."""


@contextlib.contextmanager
def scoring_lock(logdir: Path) -> Iterator[None]:
    """One scoring of `logdir` at a time (a lock on the folder itself, waited for; no file is added): the
    later one reads the logs after the earlier one has written its summary, so it counts every run the
    earlier one counted. Where the folder cannot be locked (a file system without locks), nothing is."""
    try:
        fd = os.open(logdir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # (no such folder: the scoring says so)
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def newer_runs(summary: dict, out: Path) -> list[str]:
    """The logs that out/summary.json counts, that still lie in the scored folder, and that `summary` does
    not count (a run that ended after this scoring read the folder, and that a later scoring counted)."""
    try:
        old = json.loads((Path(out) / "summary.json").read_text())
        counted = {row["log"] for row in old["runs"]}
    except (OSError, ValueError, KeyError, TypeError):
        return []
    ours = {row["log"] for row in summary["runs"]}
    return sorted(name for name in counted - ours if (Path(summary["logdir"]) / name).is_file())


def write_summary(summary: dict, out: Path) -> str:
    """Write summary.md, summary.json and eval_accuracy.png into `out`; return the markdown. All or nothing:
    each is written to a temporary file beside it and the three are renamed over the old ones only once all
    are whole, so a full disk or a plotting error leaves the previous summary as it was, and no temporary
    file. A failure raises OSError naming the file. A summary there that counts a run this one does not
    (`newer_runs`) is never replaced: NewerSummary names the runs."""
    out = Path(out)
    if newer := newer_runs(summary, out):
        raise NewerSummary(
            f"kept {out / 'summary.md'}: it counts {', '.join(newer)}, which ended after this scoring read "
            "the folder"
        )
    markdown = to_markdown(summary)
    writers = {
        "summary.md": lambda path: path.write_text(markdown),
        "summary.json": lambda path: path.write_text(json.dumps(summary, indent=2) + "\n"),
        "eval_accuracy.png": lambda path: plot_eval_accuracy(summary, path),
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OSError(f"could not create {out}: {err}") from err
    written = {}
    try:
        for name, write in writers.items():
            written[name] = out / f".{name}.{os.getpid()}.tmp"
            try:
                write(written[name])
            except Exception as err:
                raise OSError(f"could not write {out / name}: {err}") from err
        for name, tmp in written.items():
            os.replace(tmp, out / name)
    finally:
        for tmp in written.values():
            tmp.unlink(missing_ok=True)
    return markdown
