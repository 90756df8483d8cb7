"""runtime_tunables.sh against a fake /proc + /sys tree (TUNABLES_ROOT): applied, idempotent, reported,
dry-run, and without root."""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.launch.helpers import REPO, fake_host, kernel_settings

SCRIPT = REPO / "runtime_tunables.sh"
SETTINGS = [
    "cpu_governor",
    "cpuidle_state1+_disabled",
    "nmi_watchdog",
    "numa_balancing",
    "randomize_va_space",
    "thp_enabled",
    "thp_defrag",
]


def read(root: Path, name: str) -> str:
    return (root / name).read_text().strip()


def tunables(*args, root: Path, user: str | None = None, **env):
    cmd = ["bash", str(SCRIPT), *args]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    full_env = {"PATH": os.environ["PATH"], "TUNABLES_ROOT": str(root), **env}
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=30)


def report(logdir: Path) -> dict[str, list[str]]:
    (path,) = sorted(logdir.glob("runtime_tunables_*.txt"))[-1:]
    rows = [line.split() for line in path.read_text().splitlines() if not line.startswith("#")]
    assert rows[0] == ["setting", "before", "after", "status"]
    return {row[0]: row[1:] for row in rows[1:]}


def test_applies_every_setting_and_reports_before_and_after(tmp_path):
    root = fake_host(tmp_path / "host")
    result = tunables(str(tmp_path / "logs"), root=root)
    assert result.returncode == 0, result.stderr
    rows = report(tmp_path / "logs")
    assert list(rows) == SETTINGS
    assert rows["cpu_governor"] == ["powersave", "performance", "applied"]
    assert rows["randomize_va_space"] == ["2", "0", "applied"]
    assert rows["thp_enabled"] == ["madvise", "always", "applied"]
    assert rows["cpuidle_state1+_disabled"] == ["0", "1", "applied"]
    for cpu in (0, 1):
        states = [read(root, f"sys/devices/system/cpu/cpu{cpu}/cpuidle/state{s}/disable") for s in range(4)]
        assert states == ["0", "0", "1", "1"]  # only the deep states are switched off
    assert read(root, "proc/sys/kernel/numa_balancing") == "0"
    assert read(root, "proc/sys/kernel/nmi_watchdog") == "0"
    assert "cpu_governor" in result.stdout  # the table is also printed


def test_second_run_changes_nothing(tmp_path):
    root = fake_host(tmp_path / "host")
    assert tunables(str(tmp_path / "a"), root=root).returncode == 0
    snapshot = {p: p.read_text() for p in root.rglob("*") if p.is_file()}
    assert tunables(str(tmp_path / "b"), root=root).returncode == 0
    assert {p: p.read_text() for p in root.rglob("*") if p.is_file()} == snapshot
    assert {row[2] for row in report(tmp_path / "b").values()} == {"skipped:already-set"}


def test_two_reports_in_one_second_are_both_kept(tmp_path):
    root = fake_host(tmp_path / "host")
    for _ in range(3):
        assert tunables(str(tmp_path / "logs"), root=root).returncode == 0
    assert len(list((tmp_path / "logs").glob("runtime_tunables_*.txt"))) == 3


def test_dry_run_only_reports(tmp_path):
    root = fake_host(tmp_path / "host")
    before = {p: p.read_text() for p in root.rglob("*") if p.is_file()}
    result = tunables("--dry-run", root=root)
    assert result.returncode == 0, result.stderr
    assert "skipped:dry-run(would-set-0)" in result.stdout
    assert {p: p.read_text() for p in root.rglob("*") if p.is_file()} == before


def test_missing_files_and_modes(tmp_path):
    root = fake_host(tmp_path / "host", governors="powersave schedutil")
    (root / "proc/sys/kernel/nmi_watchdog").unlink()
    result = tunables(str(tmp_path / "logs"), root=root, THP_ENABLED="madvise", THP_DEFRAG="madvise")
    assert result.returncode == 0, result.stderr
    rows = report(tmp_path / "logs")
    assert rows["nmi_watchdog"] == ["-", "-", "skipped:absent"]
    assert rows["cpu_governor"][2] == "skipped:unsupported(no-performance-governor)"
    assert rows["thp_enabled"] == ["madvise", "madvise", "skipped:already-set"]


def saved_state(root: Path) -> Path:
    """Where the first value of each changed setting is kept: under the tuned tree's /run (cleared at boot,
    as the kernel settings are)."""
    return root / "run" / "mlperf_runtime_tunables.saved"


def test_restore_puts_back_the_first_values(tmp_path):
    root = fake_host(tmp_path / "host")
    before = kernel_settings(root)
    assert tunables(str(tmp_path / "logs"), root=root).returncode == 0
    assert saved_state(root).exists()
    # a second trial with another THP mode: the value to restore stays the one found first
    assert tunables(str(tmp_path / "logs"), root=root, THP_ENABLED="never").returncode == 0
    result = tunables("--restore", str(tmp_path / "logs"), root=root)
    assert result.returncode == 0, result.stderr
    assert kernel_settings(root) == before
    assert not saved_state(root).exists()
    rows = report(tmp_path / "logs")
    assert rows["randomize_va_space"] == ["0", "2", "restored"]
    assert rows["thp_enabled"] == ["never", "madvise", "restored"]
    assert rows["cpuidle_state1+_disabled"] == ["1", "0", "restored"]
    # nothing left to restore: a second restore changes nothing and says so
    result = tunables("--restore", str(tmp_path / "logs"), root=root)
    assert result.returncode == 0 and "nothing to restore" in result.stdout
    assert kernel_settings(root) == before


def test_restore_writes_only_tunable_files_and_plain_values(tmp_path):
    root = fake_host(tmp_path / "host")
    assert tunables(str(tmp_path / "logs"), root=root).returncode == 0
    (root / "etc").mkdir()
    (root / "etc" / "passwd").write_text("root:x:0:0\n")
    with saved_state(root).open("a") as state:
        state.write("passwd\tetc/passwd\tpwned\n")
        state.write("numa_balancing\tproc/sys/kernel/../../../etc/passwd\tpwned\n")
        state.write("nmi_watchdog\tproc/sys/kernel/nmi_watchdog\t1 $(reboot)\n")
    result = tunables("--restore", str(tmp_path / "logs"), root=root)
    assert result.returncode == 0, result.stderr
    assert (root / "etc" / "passwd").read_text() == "root:x:0:0\n"
    assert result.stderr.count("not a saved tunable, ignored") == 3
    assert (root / "proc/sys/kernel/randomize_va_space").read_text() == "2\n"  # the valid lines restored


def test_usage():
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 2 and "usage" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_without_root_it_skips_and_says_so():
    with tempfile.TemporaryDirectory() as tmp:  # pytest's tmp_path is private to root; nobody needs a way in
        tmp = Path(tmp)
        tmp.chmod(0o755)
        root = fake_host(tmp / "host")
        logs = tmp / "logs"
        logs.mkdir()
        logs.chmod(0o777)
        result = tunables(str(logs), root=root, user="65534")  # nobody, without sudo
        check_skipped_without_root(result, root, logs)


def check_skipped_without_root(result, root, logs):
    assert result.returncode == 0, result.stderr
    rows = report(logs)
    assert rows["numa_balancing"] == ["1", "1", "skipped:no-root"]
    assert rows["cpu_governor"] == ["powersave", "powersave", "skipped:no-root"]
    assert read(root, "proc/sys/kernel/numa_balancing") == "1"
    assert "could not be applied" in result.stderr and "privilege=none" in result.stderr
