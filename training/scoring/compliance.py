"""Check one MLPerf log with mlperf_logging's compliance checker, under its benchmark's ruleset.

    python -m training.scoring.compliance LOGFILE [--ruleset X]

A run whose logged `target_accuracy` is not the official one (our CPU demo runs) is checked against a copy
of the package's rules with only the target threshold replaced, and marked as not a valid MLPerf result.
The checker's output goes to `<log stem>.compliance.txt` next to the log; the exit status is 1 on failure.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import sys
import tempfile
from pathlib import Path

from mlperf_logging.compliance_checker import mlp_compliance

from .checkers import captured_root_log
from .rounds import choose_ruleset
from .rules import BENCHMARKS, BenchmarkRules
from .runs import read_run

RULES_ROOT = Path(mlp_compliance.__file__).parent


def check_compliance(
    log: Path, ruleset: str | None = None, write_report: bool = True
) -> tuple[bool, list[str]]:
    """(passed, messages) of the compliance checker on `log`; `ruleset` defaults to the one the scorer
    would choose for it alone (`rounds.choose_ruleset`)."""
    log = Path(log)
    run = read_run(log)
    rules = BENCHMARKS.get(run.benchmark)
    if not ruleset and rules is None:
        raise ValueError(
            f"{log}: submission_benchmark {run.benchmark!r} has no default ruleset; pass --ruleset"
        )
    if not ruleset:  # as the scorer chooses: recorded by our trainer, else from the run's date
        starts = [run.run_start_ms] if run.run_start_ms is not None else []
        recorded = [run.ruleset] if run.ruleset else []
        ruleset = choose_ruleset(rules.name, rules.ruleset, None, starts, recorded).ruleset
    if not (RULES_ROOT / f"training_{ruleset}").is_dir():
        raise ValueError(f"{log}: mlperf_logging has no training ruleset {ruleset!r}")
    messages = []
    with tempfile.TemporaryDirectory(prefix="compliance_") as tmp:
        config = f"training_{ruleset}/common.yaml"
        if rules and run.target_accuracy is not None and not rules.is_official_target(run.target_accuracy):
            config, substituted = _patch_target(
                Path(tmp),
                ruleset,
                rules,
                run.target_accuracy,
                run.max_sequence_length,
                run.evaluation_frequency,
            )
            messages.append(
                f"!!! DEMO RUN, NOT A VALID MLPerf RESULT: {log.name} logs target_accuracy "
                f"{run.target_accuracy}, not {rules.name}'s official {rules.target}; checked against a copy "
                f"of training_{ruleset} whose closed_{rules.name}.yaml has {substituted} !!!"
            )
        ok, lines = _run_checker(log, ruleset, config)
    if not ok:
        messages += misnamed_keys(run.keys, ruleset)
    messages += lines
    messages.append(f"{'SUCCESS' if ok else 'FAILED'}: {log} (training_{ruleset})")
    if write_report:
        log.with_name(f"{log.stem}.compliance.txt").write_text("\n".join(messages) + "\n")
    return ok, messages


def misnamed_keys(keys: set[str], ruleset: str) -> list[str]:
    """An error for each key the ruleset's common rules require that the log lacks while it has a near
    spelling of it (AMD's `lowest_numerical_precision_linear` for `lowest_numerical_precision_in_linear`)."""
    rules = (RULES_ROOT / f"training_{ruleset}" / "common.yaml").read_text()
    required = re.findall(r"NAME:\s+(\w+)\s+REQ:\s+EXACTLY_ONE", rules)
    found = []
    for key in required:
        if key in keys:
            continue
        close = difflib.get_close_matches(key, sorted(keys - set(required)), n=1, cutoff=0.85)
        if close:
            why = f"the log has {close[0]!r} where training_{ruleset} requires {key!r} (a misnamed key)"
            found.append(f"ERROR: {why}")
    return found


def _patch_target(
    tmp: Path,
    ruleset: str,
    rules: BenchmarkRules,
    target: float,
    seq_len: int | None = None,
    eval_frequency: int | None = None,
) -> tuple[str, str]:
    """Copy training_<ruleset>/ into `tmp` with the benchmark's target threshold replaced by `target` (and,
    for a demo that trains shorter sequences than the rules fix, e.g. Llama 3.1 8B's 8192, that length by
    the logged `seq_len`; for one that evaluates more often than the rules fix, flux1's every 262,144
    samples, that interval by the logged `eval_frequency`). Returns the copy's common.yaml (absolute: the
    checker's os.path.join keeps it) and what was replaced."""
    folder = tmp / f"training_{ruleset}"
    shutil.copytree(RULES_ROOT / f"training_{ruleset}", folder)
    for path in folder.glob("*.yaml"):  # configs enqueue each other by relative path: point them at the copy
        text = path.read_text()
        path.write_text(text.replace(f"enqueue_config('training_{ruleset}/", f"enqueue_config('{folder}/"))
    closed = folder / f"closed_{rules.name}.yaml"
    op = ">=" if rules.higher_is_better else "<="
    text = closed.read_text()
    # the threshold: `(v['value'] >= 0.720)` (BERT), `v['value'] <= 0.586 and ...` (flux1)
    checks = re.finditer(rf"\(?v\['value'\] {op} ([0-9.]+)\)?", text)
    found = [m for m in checks if float(m.group(1)) == rules.target]
    if len(found) != 1:
        raise ValueError(
            f"{RULES_ROOT / folder.name / closed.name}: expected one `(v['value'] {op} {rules.target})`"
        )
    old = found[0].group(0)
    new = old.replace(found[0].group(1), f"{target!r}", 1)
    text = text.replace(old, new)
    replaced = [f"`{old}` replaced by `{new}`"]
    fixed_len = re.search(
        r"NAME:\s+max_sequence_length\s+REQ:\s+\w+\s+CHECK: \" v\['value'\] == (\d+) \"", text
    )
    if fixed_len and seq_len is not None and int(fixed_len.group(1)) != seq_len:
        old_len = f"v['value'] == {fixed_len.group(1)}"
        text = text.replace(old_len, f"v['value'] == {seq_len}")
        replaced.append(f"`{old_len}` (max_sequence_length) replaced by `v['value'] == {seq_len}`")
    fixed_every = re.search(
        r"NAME:\s+evaluation_frequency\s+REQ:\s+\w+\s+CHECK: \"\s*(v\['value'\] == [^\"]+?)\s*\"", text
    )
    if fixed_every and eval_frequency is not None:
        old_every = fixed_every.group(1)
        text = text.replace(old_every, f"v['value'] == {eval_frequency}")
        replaced.append(f"`{old_every}` (evaluation_frequency) replaced by `v['value'] == {eval_frequency}`")
    closed.write_text(text)
    return str(folder / "common.yaml"), " and ".join(replaced)


def _run_checker(log: Path, ruleset: str, config: str) -> tuple[bool, list[str]]:
    # mlp_compliance queues configs in a module-level list: start and end each check with it empty
    mlp_compliance.enqueued_configs.clear()
    checker = mlp_compliance.make_checker("training", ruleset, quiet=False, werror=False)
    with captured_root_log() as lines:
        try:
            ok = checker.check_file(str(log), config)
        finally:
            mlp_compliance.enqueued_configs.clear()
    return bool(ok), lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.scoring.compliance",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("logfile", type=Path)
    parser.add_argument("--ruleset", help="mlperf_logging ruleset, e.g. 5.1.0 (default: the benchmark's)")
    args = parser.parse_args(argv)
    if not args.logfile.is_file():
        parser.error(f"no such log file: {args.logfile}")
    try:
        ok, messages = check_compliance(args.logfile, args.ruleset)
    except ValueError as e:
        sys.exit(f"error: {e}")
    print("\n".join(messages))
    print(f"report: {args.logfile.with_name(args.logfile.stem + '.compliance.txt')}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
