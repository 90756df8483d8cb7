"""What a run shows on the console (training.common.console): progress and evaluation lines for the
:::MLLOG lines, a failed worker's own error without torchrun's report after it; the log keeps every line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.launch.helpers import PREFIX, REPO


def mllog(key: str, value=None, time_ms: int = 0, **metadata) -> str:
    event = {
        "namespace": "",
        "time_ms": time_ms,
        "event_type": "POINT_IN_TIME",
        "key": key,
        "value": value,
        "metadata": metadata,
    }
    return ":::MLLOG " + json.dumps(event) + "\n"


# what torch 2.13's torchrun prints after a worker exits 2 (its log line, its traceback, its report)
TORCHRUN_REPORT = """\
E1127 03:00:09.750000 26600 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 2) local_rank: 0 (pid: 26633) of binary: /usr/bin/python
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1032, in <module>
    main()
  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
training.llama2_70b_lora.train FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-27_03:00:09
  rank      : 0 (local_rank: 0)
  exitcode  : 2 (pid: 26633)
  error_file: <N/A>
============================================================
"""  # noqa: E501, W291 - as torchrun prints it


def shown(lines: list[str], times: list[float] | None = None) -> list[str]:
    from training.common.console import Console

    out: list[str] = []
    clock = iter(times or [])
    console = Console(out.append, now=lambda: next(clock))
    for line in lines:
        console.feed(line)
    console.close()
    return [line.rstrip("\n") for line in out]


def test_mllog_lines_become_progress_and_evaluation_lines():
    run = [
        mllog("submission_benchmark", "llama2_70b_lora"),
        mllog("global_batch_size", 8),
        mllog("opt_learning_rate_training_steps", 192),
        mllog("target_accuracy", 5.68),
        "lora: optimizer: AdamW (foreach), the adapters only\n",
        "lora: sample limit 1536 (192 steps of 8 samples)\n",
        mllog("run_start", time_ms=1_000_000),
        "step 50 samples 400 loss 5.5420 lr 1.272e-02 grad_norm 0.8325\n",
        mllog("eval_accuracy", 5.6482, time_ms=1_016_000, samples_count=512),
        "eval at 512 samples: loss 5.6482 (target 5.68)\n",
        mllog("run_stop", time_ms=1_017_000, samples_count=512, status="success"),
        "RESULT,llama2_70b_lora,,26,reproduction,2026-11-27 02:53:40 AM\n",
    ]
    assert shown(run, times=[1_010.0]) == [
        "lora: optimizer: AdamW (foreach), the adapters only",
        "lora: sample limit 1536 (192 steps of 8 samples)",
        "step 50 | 400 samples | loss 5.5420 | 40.0 samples/s | 0:00:28 left to the sample limit (1,536)",
        "eval at 512 samples: eval loss 5.6482 (target 5.68) | 32.0 samples/s | 0:00:32 left to the sample "
        "limit (1,536)",
        "run_stop: success at 512 samples, 0:00:17 after run_start",
        "RESULT,llama2_70b_lora,,26,reproduction,2026-11-27 02:53:40 AM",
    ]


def test_the_time_left_counts_to_the_limit_the_trainer_said_not_the_lr_horizon():
    """MAX_SAMPLES_TERMINATION=8192 on Llama 3.1 8B: max_steps (1,200,000) x GBS 8 is the cosine's horizon,
    9,600,000 samples; the run stops at 8,192. Without the trainer's line no limit is guessed."""
    run = [
        mllog("submission_benchmark", "llama31_8b"),
        mllog("global_batch_size", 8),
        mllog("max_steps", 1_200_000),
        "llama31_8b: sample limit 8192 (1024 steps of 8 samples)\n",
        mllog("run_start", time_ms=1_000_000),
        "step 100 samples 800 loss 9.1000 lr 1.000e-04\n",
    ]
    assert shown(run, times=[1_010.0])[-1] == (
        "step 100 | 800 samples | loss 9.1000 | 80.0 samples/s | 0:01:32 left to the sample limit (8,192)"
    )
    without = [line for line in run if "sample limit" not in line]
    assert shown(without, times=[1_010.0])[-1] == "step 100 | 800 samples | loss 9.1000 | 80.0 samples/s"


def test_bert_s_samples_are_its_epoch_num():
    run = [mllog("submission_benchmark", "bert"), mllog("target_accuracy", 0.12), mllog("run_start")]
    run.append(mllog("eval_accuracy", 0.0594, time_ms=4_000, epoch_num=1100))
    assert shown(run) == ["eval at 1,100 samples: masked-LM accuracy 0.0594 (target 0.12) | 275.0 samples/s"]


def test_torchrun_s_report_gives_way_to_one_line_after_the_worker_s_own_error():
    worker = "lora: data error: /data/model/model.safetensors: sampled blocks differ (modified in place)\n"
    lines = [worker, *TORCHRUN_REPORT.splitlines(keepends=True), "ENDING TIMING RUN AT ...\n"]
    assert shown(lines) == [
        worker.rstrip("\n"),
        "torchrun: a worker failed (exit code 2); its error is above, torchrun's report in the log",
        "ENDING TIMING RUN AT ...",
    ]


def test_a_worker_s_own_traceback_and_other_lines_are_shown_as_they_are():
    crash = [
        "Traceback (most recent call last):\n",
        '  File "train.py", line 3, in <module>\n',
        "    main()\n",
        "RuntimeError: CUDA error: an illegal memory access\n",
    ]
    others = ["step 1/16 (iterations 1-8/128) loss 7.6 | 4.062 s/iteration\n", ":::MLLOG {not json\n", "\n"]
    assert shown([*crash, *others]) == [line.rstrip("\n") for line in crash] + [others[0].rstrip("\n"), ""]
    assert shown(crash[:2]) == [line.rstrip("\n") for line in crash[:2]]  # cut off: shown at the end


@pytest.mark.slow
def test_a_real_torchrun_report_is_recognized(tmp_path):
    """torchrun's report as this torch prints it (the test above holds a copy of torch 2.13's)."""
    script = tmp_path / "fail.py"
    script.write_text("import sys\nprint('worker: error: the clear one', file=sys.stderr)\nsys.exit(2)\n")
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0 and "ChildFailedError" in run.stderr
    assert shown(run.stderr.splitlines(keepends=True)) == [
        "worker: error: the clear one",
        "torchrun: a worker failed (exit code 2); its error is above, torchrun's report in the log",
    ]


def test_the_launcher_s_console_and_log(launch):
    """The console has the progress of the run and no :::MLLOG line; the log has them all; the launcher ends
    by saying where the results are. CONSOLE=full shows every line."""
    result = launch.run()
    assert result.returncode == 0, result.stdout + result.stderr
    log = (launch.logdir / f"{PREFIX}_1.log").read_text()
    assert log.count(":::MLLOG") == 2 and ":::MLLOG" not in result.stdout
    assert "run_stop: " in result.stdout  # (the fake trainer's run_stop has no status)
    where = f"{launch.logdir}/{PREFIX}_<i>.log"
    last = result.stdout.rstrip().splitlines()[-1]
    assert last == f"run_with_docker.sh: each run's full output, its MLLOG lines included: {where}"
    full = launch.run(CONSOLE="full")
    assert full.stdout.count(":::MLLOG") == 2, full.stdout
    assert launch.run(CONSOLE="quiet").returncode == 2


def test_the_console_filter_runs_as_the_launchers_start_it():
    lines = mllog("run_start") + "hello\n" + mllog("run_stop", samples_count=8, status="aborted")
    run = subprocess.run(
        [sys.executable, "-m", "training.common.console"],
        input=lines,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert (
        run.returncode == 0
        and run.stdout == "hello\nrun_stop: aborted at 8 samples, 0:00:00 after run_start\n"
    )
