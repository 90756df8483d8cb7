"""What a run shows on the console; its log file keeps every line.

The launchers write each run's whole output to LOGDIR/<tag>.log and pipe it through this filter on its way to
the terminal (`python -m training.common.console`, standard library only, so it runs on a host without the
training image's packages):

- `:::MLLOG` lines (half of a run's output) are read, not shown. Each evaluation is shown as one line, with
  the target the run logged, and `run_stop` as its status and time.
- A trainer's `step N samples S loss L ...` line becomes a compact progress line: step, loss, samples/s
  since the previous one, and the time left to the sample limit at that rate. The limit is the one the MLPerf
  loop says before run_start (`<prog>: sample limit N (...)`: its step limit times the global batch, so
  MAX_SAMPLES_TERMINATION where it is set), not a hyperparameter's: `max_steps` and
  `opt_learning_rate_training_steps` are the learning-rate schedule's horizon. The trainers' own `eval at`
  lines give way to the evaluation lines above.
- torchrun's own failure report (its log lines, the `ChildFailedError` traceback and the `====` block after
  a worker exits non-zero, or the traceback of a stop by signal) and its OMP_NUM_THREADS banner become one
  line: the failed worker has said why above it.

Every other line passes unchanged. A line this filter cannot read passes unchanged too, and the filter never
stops reading: the log's writer (tee) must never be cut off.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable

MLLOG = ":::MLLOG "
TORCHRUN_LOG = re.compile(r"^[EWI]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*torch/distributed/")
TORCHRUN_ERROR = "torch.distributed.elastic."  # ChildFailedError, SignalException
BANNER = ("Setting OMP_NUM_THREADS environment variable for each process",)
STEP = re.compile(r"^step (\d+) samples (\d+) loss (\S+)")
EVAL_LINE = re.compile(r"^eval at \d+ samples: ")  # the trainers' own
SAMPLE_LIMIT = "sample limit"  # the MLPerf loop's line: `<prog>: sample limit N (S steps of B samples)`
LIMIT_LINE = re.compile(rf"^\S+: {SAMPLE_LIMIT} (\d+) ")
# what each benchmark's eval_accuracy is, in words
METRICS = {
    "bert": "masked-LM accuracy",
    "llama31_8b": "log perplexity",
    "llama2_70b_lora": "eval loss",
    "flux1": "validation loss",
}
REPORT_LINES = 400  # a torchrun report longer than this is not one: its lines are shown again


def clock(seconds: float) -> str:
    s = max(int(round(seconds)), 0)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class TorchrunReport:
    """Drops torchrun's own report on a failed or stopped worker; `feed` returns the lines to show."""

    def __init__(self) -> None:
        self.traceback: list[str] | None = None  # a traceback being read: torchrun's, or to be shown
        self.report = 0  # inside torchrun's ==== block: the lines read so far
        self.rules = 0  # its ==== lines seen
        self.exitcode = ""

    def feed(self, line: str) -> list[str]:
        text = line.rstrip("\n")
        if self.report:
            return self._in_report(line, text)
        if self.traceback is not None:
            if text.startswith((" ", "\t")) or not text:  # a frame, or a blank line inside
                self.traceback.append(line)
                return []
            lines, self.traceback = [*self.traceback, line], None
            if not text.startswith(TORCHRUN_ERROR):
                return lines
            if "ChildFailedError" in text:
                self.report, self.rules, self.exitcode = 1, 0, ""
                return []
            return ["torchrun: stopped by a signal (its traceback is in the log)\n"]
        if text == "Traceback (most recent call last):":
            self.traceback = [line]
            return []
        if TORCHRUN_LOG.match(text) or text.startswith(BANNER) or (len(text) >= 10 and set(text) == {"*"}):
            return []
        return [line]

    def _in_report(self, line: str, text: str) -> list[str]:
        self.report += 1
        if text.startswith("=" * 10):
            self.rules += 1
        found = re.match(r"\s*exitcode\s*:\s*(-?\d+)", text)
        if found and not self.exitcode:
            self.exitcode = found.group(1)
        if self.rules >= 2 or self.report > REPORT_LINES:
            self.report = 0
            code = f" (exit code {self.exitcode})" if self.exitcode else ""
            return [f"torchrun: a worker failed{code}; its error is above, torchrun's report in the log\n"]
        return []

    def close(self) -> list[str]:
        lines = self.traceback or []
        self.traceback = None
        return lines


class Console:
    """The filter: `feed` each line of the run's output, `close` at its end; shown lines go to `write`.
    Rates are the samples since run_start over the time since: evaluations timed by their MLLOG time_ms,
    the trainers' step lines by when they arrive (a trainer that does not flush them is timed late)."""

    def __init__(self, write: Callable[[str], None], now: Callable[[], float] = time.time) -> None:
        self.write, self.now = write, now
        self.torchrun = TorchrunReport()
        self.logged: dict[str, object] = {}  # MLLOG key -> its value (the hyperparameters)
        self.limit: int | None = None  # the samples the run trains at most, as its trainer said
        self.started: float | None = None  # run_start's time (seconds)

    def feed(self, line: str) -> None:
        for shown in self.torchrun.feed(line):
            self._show(shown)

    def close(self) -> None:
        for shown in self.torchrun.close():
            self._show(shown)

    def _show(self, line: str) -> None:
        text = line.rstrip("\n")
        if text.startswith(MLLOG):
            self._mllog(text[len(MLLOG) :])
        elif (step := STEP.match(text)) is not None:
            head = f"step {step.group(1)} | {int(step.group(2)):,} samples | loss {step.group(3)}"
            self.write(head + self._pace(int(step.group(2)), self.now()) + "\n")
        elif not EVAL_LINE.match(text):
            if (limit := LIMIT_LINE.match(text)) is not None:
                self.limit = int(limit.group(1))
            self.write(line)

    def _mllog(self, payload: str) -> None:
        try:
            event = json.loads(payload)
            key, value, meta = event["key"], event.get("value"), event.get("metadata") or {}
            when = float(event["time_ms"]) / 1000 if "time_ms" in event else self.now()
        except (ValueError, KeyError, TypeError, AttributeError):
            return  # a damaged line: the log has it, the compliance checker will name it
        samples = meta.get("samples_count", meta.get("epoch_num"))  # BERT counts samples as epoch_num
        at = f" at {samples:,} samples" if isinstance(samples, int) else ""
        if key == "run_start":
            self.started = when
        elif key == "eval_accuracy":
            metric = METRICS.get(str(self.logged.get("submission_benchmark")), "eval_accuracy")
            target = self.logged.get("target_accuracy")
            shown = f"{value:.4f}" if isinstance(value, (int, float)) else repr(value)
            aim = f" (target {target})" if target is not None else ""
            pace = self._pace(samples, when) if isinstance(samples, int) else ""
            self.write(f"eval{at}: {metric} {shown}{aim}{pace}\n")
        elif key == "run_stop":
            took = f", {clock(when - self.started)} after run_start" if self.started is not None else ""
            self.write(f"run_stop: {meta.get('status', 'no status')}{at}{took}\n")
        else:
            self.logged[key] = value

    def _pace(self, samples: int, when: float) -> str:
        """ " | R samples/s | T left to the sample limit (N)", as far as they are known."""
        if self.started is None or when <= self.started or samples <= 0:
            return ""
        rate = samples / (when - self.started)
        limit = self.limit
        left = f" | {clock((limit - samples) / rate)} left to the sample limit ({limit:,})" if limit else ""
        return f" | {rate:,.1f} samples/s{left}"


def main() -> int:
    """stdin to stdout through Console; a line it cannot read, or any error of its own, passes lines through
    unchanged from then on."""
    out = sys.stdout

    def write(text: str) -> None:
        out.write(text)
        out.flush()

    console, broken = Console(write), False
    for line in sys.stdin:
        try:
            if broken:
                write(line)
            else:
                console.feed(line)
        except BrokenPipeError:  # nobody reads the console: keep reading, so the log's writer goes on
            out = open("/dev/null", "w")  # noqa: SIM115 - for the rest of the run
        except Exception:  # noqa: BLE001 - never lose the console: show everything from here on
            broken = True
            write(line)
    if not broken:
        console.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
