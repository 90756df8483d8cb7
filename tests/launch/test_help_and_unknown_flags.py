"""Every script a user may call answers -h/--help with its usage and changes nothing, and refuses an argument
it does not know before anything is written: `runtime_tunables.sh --help` as root must not take --help for
its log folder and retune the kernel.

Each script runs in the worst case: a shell where the config is sourced and everything is set, so that a
script that ignored its arguments would go on and run (with the launcher tests' fakes: a fake /proc + /sys
for the tunables, a recorder for the page-cache drop, the fake python, docker and SLURM). Nothing under the
test's folder may change (no log folder, no recorded call, no cache drop), the fake host keeps every setting,
and the checkout gets no new file. Run as root (as CI runs) the tunables would be written if they were
going to be.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launch.helpers import CONFIG, FAKES, REPO, fake_host, fake_launch, kernel_settings, shell_files

SLURM_FAKES = REPO / "tests" / "slurm" / "fakes"
# Shell files that are not a user's command: sourced helpers, the test runner (its arguments are pytest's),
# GPU measurement scripts (perf/, not run by CI).
NOT_COMMANDS = ("scripts/", "configs/", "perf/", "tests/", "test.sh")
PREPARE = sorted(p.relative_to(REPO).as_posix() for p in REPO.glob("input_preprocessing/**/prepare_data.sh"))
COMMANDS = [
    "runtime_tunables.sh",
    "run_with_docker.sh",
    "run.sub",
    "demo.sh",
    "training/run_and_time.sh",
    *PREPARE,
]


def test_every_user_command_is_listed():
    found = {p.relative_to(REPO).as_posix() for p in shell_files()}
    commands = {name for name in found if not name.startswith(NOT_COMMANDS)}
    assert commands == set(COMMANDS)
    assert len(PREPARE) >= 4  # the front door and one per benchmark


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its content (None for a folder)."""
    return {
        p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes() for p in folder.rglob("*")
    }


def checkout_state() -> list[str]:
    """The checkout's untracked and ignored files (a new .venv, demo/ or results/ shows here).

    Python's bytecode caches are left out: any import writes them, this script's or another test
    worker's at the same moment, and they are not something a command made."""
    listing = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in listing.splitlines() if "/__pycache__/" not in f"/{line[3:]}"]


@pytest.fixture
def shell(tmp_path):
    """(environment, work folder, fake host): a config sourced and every variable a run needs set."""
    launch = fake_launch(tmp_path, "TEST_1x1x4", CONFIG.replace("DGXNGPU=2", "DGXNGPU=1"))
    host = fake_host(tmp_path / "host")
    for name, target in [
        ("srun", SLURM_FAKES / "srun"),
        ("scontrol", SLURM_FAKES / "scontrol"),
        ("docker", FAKES / "docker"),
    ]:
        (tmp_path / "bin" / name).symlink_to(target)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **launch.env,
        "TUNABLES_ROOT": str(host),
        "DROPCACHE_CMD": f"touch {tmp_path / 'page-cache-dropped'}",
        "BENCHMARK": "bert",
        "DGXSYSTEM": "TEST_1x1x4",
        "DGXNNODES": "1",
        "DGXNGPU": "1",
        "NEXP": "1",
        "DEMO_DIR": str(tmp_path / "demo"),
        "VENV": str(tmp_path / "venv"),
        "PYTHON_FOR_VENV": str(FAKES / "python"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_CPUS_ON_NODE": "2",
        "SLURM_SUBMIT_DIR": str(REPO),
        "CONTAINER_RUNTIME": "none",
    }
    return env, work, host


def run_script(script: str, args: list[str], env: dict, work: Path) -> subprocess.CompletedProcess:
    if script.startswith("input_preprocessing/"):  # they check their Python has the data libraries
        env = {**env, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(REPO / script), *args], env=env, cwd=work, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("script", COMMANDS)
@pytest.mark.parametrize("flag", ["--help", "--no-such-flag"])
def test_help_and_unknown_flags_change_nothing(shell, tmp_path, script, flag):
    env, work, host = shell
    args = [flag]
    if script.startswith("input_preprocessing/") and flag == "--no-such-flag":
        args = ["--outputdir", str(tmp_path / "prepared"), flag]  # refused before the folder is made
    settings, files, checkout = kernel_settings(host), snapshot(tmp_path), checkout_state()
    result = run_script(script, args, env, work)
    said = result.stdout + result.stderr
    if flag == "--no-such-flag":
        assert result.returncode == 2, said
        assert "--no-such-flag" in result.stderr or "required" in result.stderr, said
    else:
        assert result.returncode == 0, said
        assert "usage" in result.stdout.lower(), said
        if not script.startswith("input_preprocessing/"):  # (theirs is argparse's -h)
            assert run_script(script, ["-h"], env, work).stdout == result.stdout
    assert kernel_settings(host) == settings
    assert snapshot(tmp_path) == files, f"{script} {flag} wrote files: {said}"
    assert checkout_state() == checkout


def test_runtime_tunables_refuses_before_writing(tmp_path):
    """Its own arguments: one LOGDIR, one mode; a LOGDIR after -- may begin with a dash."""
    host = fake_host(tmp_path / "host")
    env = {"PATH": os.environ["PATH"], "TUNABLES_ROOT": str(host)}
    before = kernel_settings(host)
    for args, said in [
        (["a", "b"], "one LOGDIR expected, got a and b"),
        (["--dry-run", "--restore", "logs"], "give one of them"),
    ]:
        result = subprocess.run(
            ["bash", str(REPO / "runtime_tunables.sh"), *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2 and said in result.stderr, result.stderr
        assert kernel_settings(host) == before and not (tmp_path / "a").exists()
    result = subprocess.run(
        ["bash", str(REPO / "runtime_tunables.sh"), "--dry-run", "--", "-logs"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert list((tmp_path / "-logs").glob("runtime_tunables_*.txt")) and kernel_settings(host) == before
