"""How a run ended, as the trainer itself saw it, written next to its log for the launcher and the scorer.

torchrun exits 1 whatever its workers' exit codes were, so from the outside a data error, a full disk and a
crash all look like a run that did not converge. Each trainer's `__main__` is `outcome.run(main, "bert")`:
it runs the trainer, classifies how it ended and writes LOGDIR/<RUN_TAG>.outcome.json,
{"status": "data_error", "detail": "...part_00003: cannot read HDF5 (...)", "rank": 0, "time": ...}.
Rank 0 always writes it; another rank only when it fails, as <RUN_TAG>.outcome.rank<N>.json, because when
one rank fails the others are stopped by torchrun or break in their next collective: the first failure
written is the cause, the later ones its echo. A run that reached its end (`ended`, at run_stop) has ended
so: a rank stopped by SIGTERM after that, in its teardown (torchrun stops the other ranks as soon as one
exits non-zero, as every rank of a run that did not converge does), writes the run's end on rank 0 and
nothing on the others, never "interrupted".

    python -m training.common.outcome LOG    # prints the verdict of the run that wrote LOG (exit 1: none)

Only the standard library is imported at the top: the launcher runs this once per trial.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

# status -> (words of the verdict, exit status of the trainer)
STATUSES = {
    "converged": ("converged", 0),
    "not_converged": ("not converged", 1),
    "diverged": ("diverged", 1),
    "config_error": ("config error", 2),
    "data_error": ("data error", 2),
    "disk_full": ("disk full", 2),
    "interrupted": ("interrupted", 130),  # 128 + the signal's number, when it is known
    "crashed": ("crashed", 1),
}


class DataError(RuntimeError):
    """Missing, unreadable or malformed input data. Each benchmark's data module subclasses it, so that this
    shared code tells a data error from a crash without importing a benchmark."""


class Interrupted(BaseException):
    """SIGTERM or SIGINT (the launcher passes on the one it got: SIGINT for a Ctrl-C) raised in the main
    thread, so that the run's end is written like any other, naming the signal; a BaseException like
    KeyboardInterrupt, so no `except Exception` swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class Outcome:
    status: str  # one of STATUSES
    detail: str = ""
    exit_code: int | None = None  # None: the status's own

    def describe(self) -> str:
        words = STATUSES.get(self.status, (self.status, 1))[0]
        return f"{words}: {self.detail}" if self.detail else words

    @property
    def code(self) -> int:
        return STATUSES.get(self.status, ("", 1))[1] if self.exit_code is None else self.exit_code


_run_end: Outcome | None = None  # this process's run, once it reached its end (`ended`)


def ended(converged: bool, progress: str, diverged: str = "") -> Outcome:
    """The outcome of a run that reached its end: `progress` says how far it got (its last evaluation against
    the target), `diverged` why it stopped early on a non-finite loss. Kept as this process's run end: a
    SIGTERM after it stops the teardown, not the run (`run`)."""
    global _run_end
    if converged:
        _run_end = Outcome("converged", progress)
    else:
        _run_end = Outcome("diverged", diverged) if diverged else Outcome("not_converged", progress)
    return _run_end


def _chain(err: BaseException) -> Iterator[BaseException]:
    """`err` and the exceptions it was raised from or while handling (a DataError wraps its OSError)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def classify(err: BaseException) -> Outcome:
    """The outcome of a trainer that raised `err`."""
    from training.common.config import ConfigError  # here: config imports torch, the launcher's CLI need not

    for e in _chain(err):
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            where = f" writing {e.filename}" if e.filename else ""
            return Outcome("disk_full", f"no space left on device{where}")
    if isinstance(err, Interrupted):
        return Outcome("interrupted", str(err), 128 + err.signum)
    if isinstance(err, KeyboardInterrupt):
        return Outcome("interrupted", "SIGINT", 128 + signal.SIGINT)
    if isinstance(err, ConfigError):
        return Outcome("config_error", str(err))
    if isinstance(err, (DataError, FileNotFoundError)):
        return Outcome("data_error", str(err))
    return Outcome("crashed", f"{type(err).__name__}: {err}")


def outcome_path(logdir: str | os.PathLike, run_tag: str, rank: int = 0) -> Path:
    suffix = "" if rank == 0 else f".rank{rank}"
    return Path(logdir) / f"{run_tag}.outcome{suffix}.json"


def write(path: Path, outcome: Outcome, rank: int) -> None:
    """Write `outcome` to `path` whole (a temporary file renamed over it); a failure (the disk that is full)
    is said on stderr and does not change the run's exit status."""
    record = {"status": outcome.status, "detail": outcome.detail, "rank": rank, "time": time.time()}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        print(f"could not write the run's outcome to {path}: {err}", file=sys.stderr)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _raise_interrupted(signum, frame) -> NoReturn:
    """The first stop signal is the one named. Those after it are ignored: torchrun passes on to its workers
    the signal their process group got too, and srun follows a SIGINT with SIGTERM; a second raise would cut
    short the writing of the first one's outcome, or name the echo instead of the cause."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


def run(main: Callable[[], Outcome], prog: str) -> NoReturn:
    """A trainer's `__main__`: run `main` (which returns how the run ended: converged, not converged or
    diverged), classify what it raised instead, write the outcome file where LOGDIR and RUN_TAG say (when
    both are set) and exit with the outcome's status (0 converged, 1 not converged or crashed, 2 config, data
    or disk error, 128 + N on signal N). A signal after the run's end (`ended`) stopped its teardown: the
    outcome is the run's end, written by rank 0 alone."""
    global _run_end
    env = os.environ  # the entry point's own reading: the config may be what failed
    rank = int(env.get("RANK", env.get("SLURM_PROCID", "0")))
    for sig in STOP_SIGNALS:
        signal.signal(sig, _raise_interrupted)
    raised, _run_end = False, None
    try:
        outcome = main()
    except SystemExit:  # --help
        raise
    except BaseException as err:  # noqa: BLE001 - every ending is classified and written
        outcome, raised = classify(err), True
        if outcome.status == "interrupted" and _run_end is not None:  # the teardown was stopped, not the run
            print(
                f"{prog}: {outcome.detail} in the teardown, after the run's end", file=sys.stderr, flush=True
            )
            outcome, raised = _run_end, False
        else:
            if outcome.status == "crashed":
                traceback.print_exc()
            print(f"{prog}: {outcome.describe()}", file=sys.stderr, flush=True)
    if env.get("LOGDIR") and env.get("RUN_TAG") and (rank == 0 or raised):
        write(outcome_path(env["LOGDIR"], env["RUN_TAG"], rank), outcome, rank)
    exit_process(outcome.code)


def exit_process(code: int) -> NoReturn:
    """End an entry point with `code`. A torchrun worker (LOCAL_RANK set), whose results are all written:
    flush what Python buffers, then end without running exit handlers and C++ static destructors, which have
    aborted ranks of finished runs after their process group was destroyed ("terminate called without an
    active exception", SIGABRT, so torchrun reported a failure: BERT over two SLURM nodes with gloo,
    `tests/slurm/test_slurm_cluster.py`, twice; the throughput suite's two-process FP8 run,
    `tests/throughput/test_command.py`, once). Anything else: `sys.exit`."""
    if "LOCAL_RANK" not in os.environ:
        sys.exit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def read(log: Path) -> Outcome | None:
    """The outcome of the run whose log is `log` (LOGDIR/<RUN_TAG>.log): the first failure any rank wrote,
    else rank 0's; None when no rank wrote one. A file that is not an outcome raises ValueError naming it."""
    log = Path(log)
    found = []
    for path in sorted(log.parent.glob(f"{log.stem}.outcome*.json")):
        try:
            record = json.loads(path.read_text())
            found.append((record["status"] != "converged", -float(record["time"]), record))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: not a run outcome ({err})") from None
    if not found:
        return None
    *_, first = max(found, key=lambda f: f[:2])  # a failure before a success, the earliest failure
    return Outcome(str(first["status"]), str(first.get("detail", "")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.common.outcome",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("log", type=Path, help="the run's log, LOGDIR/<RUN_TAG>.log")
    args = parser.parse_args(argv)
    try:
        outcome = read(args.log)
    except ValueError as err:
        print(f"training.common.outcome: {err}", file=sys.stderr)
        return 1
    if outcome is None:
        print(f"training.common.outcome: no {args.log.stem}.outcome*.json beside {args.log}", file=sys.stderr)
        return 1
    print(outcome.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
