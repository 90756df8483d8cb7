"""train_fsdp.py as a new user meets it: bad input ends in one line and exit 2 before anything is
built, a model that cannot fit is said so in one line, the suite's table stays whole and readable, a CPU
run says what its figures are, and a stop of the suite ends its row at once and keeps the rows before."""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.throughput.test_command import QUICK, TINY, env
from training.throughput import config, run, suite

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "throughput"
LLAMA = json.loads((CONFIGS / "llama-3.1-8b-4k.json").read_text())


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    "make, argv, said",
    [
        (None, ["{tmp}", "llama"], "{tmp}: a folder, not a model config"),
        (b"\xff\xfe{}", ["{cfg}", "llama"], "not UTF-8 text (byte 0xff at offset 0)"),
        (
            {**LLAMA, "rope_scaling": {**LLAMA["rope_scaling"], "factr": 8.0}},
            ["{cfg}", "llama"],
            "unknown key 'rope_scaling.factr' (did you mean factor?)",
        ),
        ({**LLAMA, "num_layers": "32"}, ["{cfg}", "llama"], "num_layers must be a positive integer, not"),
        ({**LLAMA, "rope_base": "5e5"}, ["{cfg}", "llama"], "rope_base must be a positive number, not '5e5'"),
        ({**LLAMA, "rope_scaling": {"factor": "8"}}, ["{cfg}", "llama"], "rope_scaling.factor must be"),
        (LLAMA, ["{cfg}", "llama", "--json", "{tmp}"], "--json {tmp}: a folder; give a file name"),
        (LLAMA, ["{cfg}", "llama", "--json", "{cfg}/result.json"], "is a file, not a folder"),
    ],
    ids=[
        "folder",
        "not-utf8",
        "rope-key",
        "string-number",
        "string-float",
        "rope-string",
        "json-folder",
        "json-under-a-file",
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, make, argv, said):
    cfg = tmp_path / "model.json"
    if isinstance(make, bytes):
        cfg.write_bytes(make)
    elif make is not None:
        cfg.write_text(json.dumps(make))
    fill = {"tmp": str(tmp_path), "cfg": str(cfg)}
    assert run.main([a.format(**fill) for a in argv]) == 2
    err = one_error_line(capsys)
    assert err.startswith("train_fsdp.py: error: ") and said.format(**fill) in err


def test_an_unwritable_json_is_refused_before_the_run(tmp_path, capsys):
    """Root passes every permission check, a read-only file system does not: the file is tried first."""
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    assert run.main([str(tmp_path / "tiny.json"), "llama", *QUICK, "--json", "/proc/result.json"]) == 2
    assert "--json /proc/result.json: cannot be written" in one_error_line(capsys)


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--only", "nomatch"], "--only 'nomatch' matches no row of the MI300X table: its rows are"),
        (["--nproc_per_node", "0"], "--nproc_per_node takes a positive integer, not '0'"),
        (["--output_dir", "/proc/results"], "--output_dir /proc/results: cannot be written"),
        (["--bogus"], "unknown flag --bogus"),
        (["--", "--num_iteration", "zero"], "--num_iteration takes a positive integer, not 'zero'"),
    ],
)
def test_the_suite_s_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, argv, said):
    monkeypatch.chdir(tmp_path)
    assert suite.main(["--gpu", "MI300X", *argv]) == 2
    err = one_error_line(capsys)
    assert err.startswith("train_fsdp.py --suite: error: ") and said in err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_help_lists_the_suite_and_each_flag_once():
    for text in (config.parser().format_help(), suite.parser().format_help()):
        flags = re.findall(r"^  (-[-\w]+)", text, re.M) + re.findall(r", (--[\w-]+)", text)
        assert len(flags) == len(set(flags)) and "--attention ATTENTION, --attention" not in text
    assert "train_fsdp.py --suite" in config.parser().format_help()


@pytest.mark.slow  # a process of its own: importing torch and the model code takes seconds
def test_a_model_that_cannot_fit_is_said_in_one_line_before_anything_is_built():
    """The 70B on this CPU (a 4 GiB address-space limit: the old way built it and failed allocating)."""
    limit = 4 << 30

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.run(
        [sys.executable, str(ROOT / "train_fsdp.py"), str(CONFIGS / "llama-3.1-70b.json"), "llama"],
        capture_output=True,
        text=True,
        env=env(),
        cwd=ROOT,
        timeout=120,
        preexec_fn=cap,
    )
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("train_fsdp.py: no GPU here, and Llama 3.1 70B cannot run on this CPU")
    assert "tiny-llama.json" in proc.stderr


def test_the_fit_check_on_a_gpu():
    from training.throughput import memory

    spec = config.load_model(CONFIGS / "llama-3.1-70b.json", "llama")
    memory.check_fits(spec, 8, True, 192 * 2**30, "8 x MI300X")  # AMD's: 141 GiB a GPU
    with pytest.raises(memory.CannotFit, match="does not fit on 8 x H100.*131.4 GiB per GPU.*--num_layers"):
        memory.check_fits(spec, 8, True, 80 * 2**30, "8 x H100")
    assert memory.parameters(config.load_model(CONFIGS / "tiny-llama.json", "llama")) < 2_000_000


def test_a_failed_row_has_as_many_cells_as_the_header():
    row = vars(suite.published.TABLES["MI300X"][0])
    text = suite.table(
        [{"row": row, "result": None, "error": "exit status 1 | see the log"}], "MI300X", "why"
    )
    header, _, failed = text.splitlines()[2:5]
    assert failed.count(" | ") == header.count(" | ") and "exit status 1 \\| see the log" in failed


def test_the_suite_keeps_a_whole_table_when_a_write_fails(tmp_path, monkeypatch, capsys):
    """throughput.json is written whole or not at all (a temporary file renamed): a full disk at the second
    row's table leaves the first row's table readable. Results go under results/ by default."""
    monkeypatch.chdir(tmp_path)

    def failed_row(cmd, log):
        log.write_text("train_fsdp.py: error: a fake row\n")
        return 1

    writes = []
    write_text = Path.write_text

    def full_disk_at_the_second_table(self, text, *args, **kwargs):
        if self.name.startswith("throughput.json"):
            writes.append(self)
            if len(writes) == 2:
                write_text(self, text[: len(text) // 2])
                raise OSError(errno.ENOSPC, "No space left on device")
        return write_text(self, text, *args, **kwargs)

    monkeypatch.setattr(suite, "run_row", failed_row)
    monkeypatch.setattr(suite, "check_this_node", lambda *a: None, raising=False)
    monkeypatch.setattr(Path, "write_text", full_disk_at_the_second_table)
    with pytest.raises(OSError):
        suite.main(["--gpu", "MI300X", "--only", "8b-8192", "--", *QUICK])
    (out,) = (tmp_path / "results" / "throughput").iterdir()
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", f"results/throughput/{out.name}/throughput.md"], cwd=ROOT
    )
    assert ignored.returncode == 0  # run from the checkout's root, the results are ignored by git
    rows = json.loads((out / "throughput.json").read_text())["rows"]
    assert [r["error"] for r in rows] == ["error: a fake row"]
    assert not list(out.glob("*.tmp"))


def test_the_shipped_tiny_config_runs_on_a_cpu_and_says_what_its_figures_are(capsys):
    """configs/throughput/tiny-llama.json, the README's try-out on a CPU: figures per process, set beside no
    GPU's (AMD's MI300X table was the default comparison, unexplained)."""
    assert run.main([str(CONFIGS / "tiny-llama.json"), "llama", *QUICK, "--seq_len", "64"]) == 0
    out = capsys.readouterr().out
    assert "GPU" not in out.replace("no GPU here", "").replace("per GPU", "")
    assert "tokens/s/process" in out and "no comparison with AMD's figures: no GPU here" in out
    assert "MI300X" not in out


@pytest.mark.slow  # torchrun and two processes, each importing torch
def test_under_torchrun_a_config_error_is_said_once():
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    cmd = [
        *torchrun,
        str(ROOT / "train_fsdp.py"),
        str(CONFIGS / "tiny-llama.json"),
        "llama",
        "--seq_len",
        "0",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=300)
    assert proc.returncode != 0
    assert proc.stderr.count("train_fsdp.py: error: argument --seq_len") == 1, proc.stderr


def test_stopping_a_row_stops_torchrun_s_workers_too():
    """A stand-in for torchrun: a parent whose child runs in a session of its own, as torchrun starts its
    workers (a signal to the parent's process group does not reach it)."""
    code = (
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; "
        "time.sleep(60)'], start_new_session=True); print('started', flush=True); "
        "time.sleep(60)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout.readline() == "started\n"
    tree = suite._process_tree(proc.pid)
    assert len(tree) == 2
    start = time.monotonic()
    suite.stop_row(proc, grace=5)
    assert time.monotonic() - start < 4 and not any(suite._live(pid) for pid in tree)
    proc.stdout.close()


@pytest.mark.slow
def test_a_stopped_suite_ends_its_row_at_once_and_keeps_the_table(tmp_path):
    """SIGTERM while the second row runs: its torchrun and worker end within seconds (not at their next
    output line), the first row's entry and the stop are in throughput.md, exit 143."""
    configs = tmp_path / "configs"
    configs.mkdir()
    # row 1 cannot fit (not started), row 2 runs (relative paths: the rows run from the repository's root)
    (configs / "llama-3.1-8b-8k.json").write_text((CONFIGS / "llama-3.1-70b.json").read_text())
    slow = {**TINY, "embedding_dim": 256, "hidden_dim": 768, "max_seq_len": 256}
    (configs / "llama-3.1-8b-4k.json").write_text(json.dumps({"name": "Llama 3.1 8B", **slow}))
    out = tmp_path / "out"
    rows = ["--only", "8b-8192-bf16,8b-4096-bf16", "--configs", "configs", "--output_dir", "out"]
    flags = ["--num_iteration", "400", "--grad_accum", "2", "--enable_compile", "False", "--batch_size", "1"]
    cmd = [
        sys.executable,
        str(ROOT / "train_fsdp.py"),
        "--suite",
        "--nproc_per_node",
        "1",
        "--gpu",
        "MI300X",
        *rows,
        "--",
        *flags,
    ]
    proc = subprocess.Popen(
        cmd,
        env=env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        log = out / "llama-3.1-8b-4096-bf16.log"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (log.exists() and "step 1/" in log.read_text()):
            time.sleep(0.2)
        assert "step 1/" in log.read_text()
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        workers = [p for p in pids if str(configs) in _cmdline(p)]
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, output
    time.sleep(0.5)
    assert workers and not any(suite._live(pid) for pid in workers)
    table = (out / "throughput.md").read_text()
    assert (
        "| Llama 3.1 8B | BF16 | 8192 | 3 | - | - | - | 542.94 | - | - | no GPU here; does not fit" in table
    )
    assert "| Llama 3.1 8B | BF16 | 4096 | 6 | - | - | - | 523.79 | - | - | stopped by SIGTERM |" in table


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""
