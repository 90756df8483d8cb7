"""One MLPerf run, written once for every benchmark: the `:::MLLOG` events the rules check, in their order,
the run's clock and how it ended. A benchmark's `main` sets up and hands over its step (one optimizer step),
its evaluation (the score on the eval set) and its schedule; it logs its own hyperparameters in between:

    seed = dist.run_seed(cfg.seed, info.device)
    run = MLPerfRun(BENCHMARK, cfg, info, seed, "llama")   # cache_clear, init_start, submission, seed
    ... hyperparameters (run.mllog), model, optimizer, run.log_backends(...), run.log_disclosure(...),
    run.write_config(...), warm-up
    return run.train(schedule, start_training, evaluate, target)   # init_stop, run_start ... run_stop

`train` is the timed part. init_stop once every rank is ready, run_start, and only then the benchmark's
`start()` opens the training data (MLPerf's clock runs before any is read). Steps run in blocks, with an
evaluation after each scheduled step; the run stops at the target (`success`) or at the step limit
(`aborted`). A non-finite loss, checked on every rank every LOG_FREQ steps, before each evaluation and at the
last step (a check waits for the device, so not at every step), or a non-finite score also ends it `aborted`.
`tracked_stats` gives the throughput of the training since the last evaluation. `train` returns how the run
ended (training.common.outcome): against the target at its last evaluation, or "no evaluation ran".

The log follows one of MLPerf's two conventions, the one the benchmark table names as its `samples_key`:
- `samples_count` (the LLM benchmarks): a block for each stretch of training between evaluations, every event
  counting samples: tracked_stats, block_stop, eval_start, eval_accuracy, eval_stop, and block_start again
  unless the run has reached its step limit;
- `epoch_num` (BERT, whose rules count samples as "epochs"), as NVIDIA's BERT logs it: one epoch and one block
  around the whole run (epoch_start, block_start with first_epoch_num 1 ... block_stop, epoch_stop), and at
  each evaluation tracked_stats, eval_start, eval_stop, eval_accuracy.
A step that counts its own samples (`StepResult.samples`: BERT's packed rows hold one to three sequences
each) is counted so in every event, as NVIDIA counts the sequences of its packed rows; other steps count
steps x the global batch.
`train_samples` and `eval_samples`, which the rules want once each, close the log where the benchmark did not
log them with its hyperparameters.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

import torch

from training.common import backends, dist, outcome, vendor_vars
from training.common.config import RunSettings, write_effective_config
from training.common.console import SAMPLE_LIMIT
from training.common.disclosure import Disclosure
from training.common.mllog import MLLogger, constants


class BenchmarkRow(Protocol):
    """What a run needs of its row in `training.benchmarks` (not imported here: common is below it)."""

    name: str
    higher_is_better: bool
    samples_key: str


@dataclass(frozen=True)
class StepResult:
    """One optimizer step: its loss (on the device, not yet synchronised), its LR and gradient norm, and the
    samples this rank trained in it where the step counts them (None: its share of the global batch)."""

    loss: torch.Tensor
    lr: float
    grad_norm: torch.Tensor | None = None
    samples: int | None = None


@dataclass(frozen=True)
class Schedule:
    global_batch: int  # samples per optimizer step
    max_steps: int  # the step limit: the run ends there `aborted`
    evals: Collection[int]  # the steps (counted from 1) after which the model is evaluated
    log_freq: int  # steps between loss lines and non-finite checks (LOG_FREQ)

    def evaluates(self) -> bool:
        """Whether the run evaluates at all: `train` evaluates after each step of `evals` it runs, 1 to
        `max_steps`. One that does not can never reach its target (the preflight refuses its config)."""
        return any(1 <= step <= self.max_steps for step in self.evals)


class MLPerfRun:
    """One run's MLPerf log from init_start to run_stop; `mllog` is its logger, for the hyperparameters."""

    def __init__(self, benchmark: BenchmarkRow, cfg: RunSettings, info: dist.DistInfo, seed: int, prog: str):
        self.benchmark, self.cfg, self.info, self.seed, self.prog = benchmark, cfg, info, seed, prog
        self.mllog = MLLogger(info.rank)
        self.mllog.event(constants.CACHE_CLEAR, cfg.clear_caches)
        self.mllog.start(constants.INIT_START)
        self.mllog.submission(benchmark.name, cfg.org, cfg.platform, cfg.num_nodes)
        self.mllog.event(constants.SEED, seed)

    def say(self, line: str) -> None:
        """A line on rank 0's console."""
        if self.info.is_main:
            print(line, flush=True)

    def log_backends(self, chosen: dict[str, object]) -> None:
        """What each concern runs on (attention, precision, FP8, optimizer, ...): logged and shown."""
        for key, value in chosen.items():
            self.mllog.event(f"backend_{key}", value, depth=1)  # the line names the benchmark's call
            self.say(f"{self.prog}: {key}: {value}")

    def log_disclosure(self, disclosure: Disclosure) -> None:
        """The 6.x disclosure keys, from what the build did (`training.common.disclosure`)."""
        self.mllog.hyperparameters(disclosure.keys(self.cfg.config_filename), depth=1)

    def write_config(self, extra: dict) -> None:
        """LOGDIR/<RUN_TAG>.config.json (rank 0, when the runner set both): the effective config, `extra`
        (derived values, the backends chosen), the seed, and this machine's versions and libraries."""
        cfg = self.cfg
        for line in vendor_vars.describe(cfg.vendor_names):
            self.say(f"{self.prog}: {line}")
        substitutions = cfg.substitutions(self.info.world_size)
        for line in substitutions:
            self.say(f"{self.prog}: runs otherwise than its config: {line}")
        if cfg.logdir and cfg.run_tag and self.info.is_main:
            extra = {
                "seed": self.seed,
                "ruleset": cfg.effective_ruleset(),
                **extra,
                "substitutions": substitutions,
                "versions": backends.versions(),
                "available": backends.available(),
            }
            write_effective_config(cfg, cfg.logdir / f"{cfg.run_tag}.config.json", extra)

    def train(
        self,
        schedule: Schedule,
        start: Callable[[], Callable[[int], StepResult]],
        evaluate: Callable[[], float],
        target: float,
        metric: str = "eval loss",
        stats: Callable[[float], dict] | None = None,
        eval_samples: int | None = None,
        eval_counters: tuple[str, ...] = (),
    ) -> outcome.Outcome:
        """The timed run. `start()` opens the training data and returns the step: `step(i)` runs optimizer
        step i (from 0). `evaluate()` is the score on the eval set (on every rank), which reaches `target` at
        or above it (higher-is-better benchmarks) or at or below it; `metric` names it in messages.
        `stats(samples per second)`: more numbers for tracked_stats. `eval_samples`: the eval set's size, for
        a log whose hyperparameters did not give it. `eval_counters`: more metadata keys counting the samples
        of eval_accuracy."""
        log, info = self.mllog, self.info
        blocks = (
            _Blocks(log, eval_counters) if self.benchmark.samples_key == "samples_count" else _OneBlock(log)
        )
        # the console's "left to the sample limit": the step limit, not the LR schedule's horizon
        self.say(
            f"{self.prog}: {SAMPLE_LIMIT} {schedule.max_steps * schedule.global_batch} "
            f"({schedule.max_steps} steps of {schedule.global_batch} samples)"
        )
        dist.barrier()
        log.end(constants.INIT_STOP)
        log.start(constants.RUN_START)
        step_fn = start()
        blocks.start()
        status, samples, score, diverged = constants.ABORTED, 0, None, ""
        own = _OwnCount(info.device)  # the samples of steps that count them (StepResult.samples)
        window_start, window_first = time.perf_counter(), 0  # training since the last evaluation
        finite = torch.ones((), dtype=torch.bool, device=info.device)
        for index in range(schedule.max_steps):
            result = step_fn(index)
            step, samples = index + 1, samples + schedule.global_batch
            own.add(result.samples)
            finite &= torch.isfinite(result.loss)
            shown = step % schedule.log_freq == 0
            if shown or step in schedule.evals or step == schedule.max_steps:
                if dist.any_rank(~finite):
                    diverged = f"non-finite loss by step {step}"
                    print(f"{self.prog}: {diverged}; ending the run as aborted", file=sys.stderr, flush=True)
                    break
                if shown:
                    norm = "" if result.grad_norm is None else f" grad_norm {result.grad_norm.item():.4f}"
                    self.say(
                        f"step {step} samples {samples} loss {result.loss.item():.4f} lr {result.lr:.3e}"
                        + norm
                    )
            if step not in schedule.evals:
                continue
            if info.device.type == "cuda":
                torch.cuda.synchronize()
            counted = own.total(samples)
            throughput = (counted - window_first) / max(time.perf_counter() - window_start, 1e-9)
            extra = stats(throughput) if stats else {}
            score = blocks.evaluation(step, counted, result, {"throughput": throughput, **extra}, evaluate)
            self.say(f"eval at {counted} samples: {metric} {score:.4f} (target {target})")
            if score >= target if self.benchmark.higher_is_better else score <= target:
                status = constants.SUCCESS
                break
            if not math.isfinite(score):
                diverged = f"non-finite {metric} at {counted} samples"
                break
            if step < schedule.max_steps:
                blocks.resume(counted)
            window_start, window_first = time.perf_counter(), counted
        samples = own.total(samples)
        blocks.stop(samples)
        if constants.TRAIN_SAMPLES not in log.logged:
            log.event(constants.TRAIN_SAMPLES, samples)
        if constants.EVAL_SAMPLES not in log.logged and eval_samples is not None:
            log.event(constants.EVAL_SAMPLES, eval_samples)
        log.end(constants.RUN_STOP, metadata={**blocks.counted(samples), "status": status})
        reached = (
            f"{metric} {score:.4f} (target {target})"
            if score is not None
            else (f"no evaluation ran (target {metric} {target})")
        )
        progress = f"{reached} after {samples} samples"
        end = outcome.ended(status == constants.SUCCESS, progress, diverged)  # before the teardown
        if line := peak_memory_line(info.device):  # (after run_stop: outside the timed run)
            self.say(f"{self.prog}: {line}")
        dist.shutdown()
        return end


def peak_memory_line(device: torch.device) -> str | None:
    """The run's GPU memory peak on the busiest rank, against the GPU's size (None off the GPU): what a
    config's memory settings (ACL, MINIBS) are chosen from. Counted from the process's start, so the warm-up
    and the first step are in it (native FP8 calibrates there: `training.fp8.calibrate`). Every rank calls it
    (a collective)."""
    if device.type != "cuda":
        return None
    peak = float(torch.cuda.max_memory_allocated(device))
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        busiest = torch.tensor(peak, device=device)
        torch.distributed.all_reduce(busiest, op=torch.distributed.ReduceOp.MAX)
        peak = busiest.item()
    capacity = torch.cuda.get_device_properties(device).total_memory
    size = f"{peak / 2**30:.1f} GiB of {capacity / 2**30:.1f} GiB"
    return f"peak GPU memory {size} (the busiest rank, warm-up included)"


class _OwnCount:
    """The samples of steps that count them, summed over the ranks where the log needs the total (every
    rank calls `total`: a collective)."""

    def __init__(self, device: torch.device):
        self.device, self.local, self.counting = device, 0, False

    def add(self, samples: int | None) -> None:
        if samples is not None:
            self.local, self.counting = self.local + samples, True

    def total(self, nominal: int) -> int:
        """All ranks' samples so far, or `nominal` (steps x global batch) where the steps do not count."""
        if not self.counting:
            return nominal
        return int(
            dist.all_reduce_sum(torch.tensor(self.local, dtype=torch.int64, device=self.device)).item()
        )


class _Blocks:
    """The `samples_count` convention: a block for each stretch of training between evaluations."""

    def __init__(self, log: MLLogger, eval_counters: tuple[str, ...]):
        self.log, self.eval_counters, self.open = log, eval_counters, False

    def counted(self, samples: int) -> dict:
        return {"samples_count": samples}

    def start(self) -> None:
        self.resume(0)

    def resume(self, samples: int) -> None:
        self.log.start(constants.BLOCK_START, metadata=self.counted(samples))
        self.open = True

    def evaluation(self, step: int, samples: int, result: StepResult, tracked: dict, evaluate) -> float:
        at = self.counted(samples)
        tracked = {**tracked, "train_loss": result.loss.item(), "lr": result.lr}
        self.log.event("tracked_stats", tracked, metadata={**at, "step": step})
        self.stop(samples)
        self.log.start(constants.EVAL_START, metadata=at)
        score = evaluate()
        self.log.event(
            constants.EVAL_ACCURACY, score, metadata={**at, **dict.fromkeys(self.eval_counters, samples)}
        )
        self.log.end(constants.EVAL_STOP, metadata=at)
        return score

    def stop(self, samples: int) -> None:
        if self.open:
            self.log.end(constants.BLOCK_STOP, metadata=self.counted(samples))
            self.open = False


class _OneBlock:
    """The `epoch_num` convention, as NVIDIA's BERT logs it: one epoch and one block around the whole run."""

    def __init__(self, log: MLLogger):
        self.log = log

    def counted(self, samples: int) -> dict:
        return {}  # run_stop says only its status

    def start(self) -> None:
        self.log.start(constants.EPOCH_START, metadata={"epoch_num": 0})
        self.log.start(constants.BLOCK_START, metadata={"first_epoch_num": 1, "epoch_count": 1})

    def resume(self, samples: int) -> None:
        pass  # the one block goes on

    def evaluation(self, step: int, samples: int, result: StepResult, tracked: dict, evaluate) -> float:
        at = {"epoch_num": samples}
        self.log.event("tracked_stats", tracked, metadata={**at, "step": step})
        self.log.start(constants.EVAL_START, samples, metadata=at)
        score = evaluate()
        self.log.end(constants.EVAL_STOP, samples, metadata=at)
        self.log.event(constants.EVAL_ACCURACY, score, metadata=at)
        return score

    def stop(self, samples: int) -> None:
        self.log.end(constants.BLOCK_STOP, metadata={"first_epoch_num": 1})
        self.log.end(constants.EPOCH_STOP, metadata={"epoch_num": samples})
