"""The host is left as it was found: the launchers put back every kernel setting that
runtime_tunables.sh changed, at the end of the runs and when stopped by a signal, and leave the host alone for
the CPU-sized demo configs. Each test tunes a fake /proc + /sys tree (TUNABLES_ROOT), never this host."""

import json
import os
import signal
import time

import pytest

from tests.launch.helpers import (
    PREFIX,
    REPO,
    fake_host,
    kernel_settings,
    process_alive,
    stop_and_wait,
    wait_for,
)

CPU_CONFIGS = sorted(REPO.glob("configs/*/config_CPU_*.sh"))


@pytest.fixture
def host(launch):
    """An untuned fake host as the launcher's TUNABLES_ROOT."""
    root = fake_host(launch.tmp / "host")
    launch.env["TUNABLES_ROOT"] = str(root)
    return root


def test_every_setting_changed_is_restored_after_the_runs(launch, host):
    before = kernel_settings(host)
    result = launch.run(NEXP="2")
    assert result.returncode == 0, result.stdout + result.stderr
    log = (launch.logdir / f"{PREFIX}_1.log").read_text()
    assert "randomize_va_space         2                0                applied" in log  # tuned for the run
    assert kernel_settings(host) == before
    assert "runtime tunables restored" in result.stdout
    restore = [p for p in launch.logdir.glob("runtime_tunables_*.txt") if "restored" in p.read_text()]
    assert len(restore) == 1


def test_every_setting_changed_is_restored_when_stopped(launch, host):
    before = kernel_settings(host)
    proc = launch.start(NEXP="2", FAKE_SLEEP_TAGS=f"{PREFIX}_1")
    wait_for((launch.tmp / "state" / f"{PREFIX}_1.pid").exists, what="the first run to start")
    assert (host / "proc/sys/kernel/randomize_va_space").read_text() == "0\n"
    rc, out = stop_and_wait(proc, signal.SIGTERM)
    assert rc == 143, out
    assert kernel_settings(host) == before


@pytest.mark.parametrize(
    "sigint, impatient",
    [(signal.SIG_DFL, False), (signal.SIG_IGN, False), (signal.SIG_DFL, True)],
    ids=["from-a-shell", "as-a-scripts-job", "pressed-again-while-it-stops"],
)
def test_ctrl_c_stops_the_run_and_puts_the_host_back(launch, host, sigint, impatient):
    """A user's Ctrl-C on the launcher's terminal: SIGINT to its process group (the run and its tee are groups
    of their own: it passes the SIGINT on to the run). The run writes its outcome (SIGINT); its log
    says why it ended; the host is put back; exit 130. Also when started with SIGINT ignored, as a script's
    `cmd &` is, and when Ctrl-C is pressed again and again while it stops (it once killed the restore of the
    host)."""
    before = kernel_settings(host)
    master, slave = os.openpty()
    try:
        proc = launch.start(NEXP="2", FAKE_SLEEP_TAGS=f"{PREFIX}_1", sigint=sigint, terminal=slave)
        os.close(slave)
        pidfile = launch.tmp / "state" / f"{PREFIX}_1.pid"
        wait_for(pidfile.exists, what="the first run to start")
        os.write(master, b"\x03")  # ^C: the terminal sends SIGINT to its foreground process group
        deadline = time.monotonic() + 60
        while impatient and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
            os.write(master, b"\x03")
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(master)
    assert proc.returncode == 130, out
    assert out.count("caught SIGINT") == 1 and "runtime tunables restored" in out
    assert kernel_settings(host) == before
    outcome = json.loads((launch.logdir / f"{PREFIX}_1.outcome.json").read_text())
    assert (outcome["status"], outcome["detail"]) == ("interrupted", "SIGINT")  # the signal that arrived
    assert "run_with_docker.sh: run stopped by SIGINT" in (launch.logdir / f"{PREFIX}_1.log").read_text()
    wait_for(lambda: not process_alive(int(pidfile.read_text())), timeout=5, what="the training to end")
    assert launch.logs() == [f"{PREFIX}_1.log"] and launch.module_calls("training.scoring") == []


def test_a_cpu_demo_config_leaves_the_host_alone(launch, host):
    config = launch.tmp / "config_TEST_1x2x4.sh"
    config.write_text(config.read_text() + "export CPU_DEMO=1\n")
    before = kernel_settings(host)
    result = launch.run(NEXP="2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert kernel_settings(host) == before
    assert list(launch.logdir.glob("runtime_tunables_*.txt")) == []
    log = (launch.logdir / f"{PREFIX}_1.log").read_text()
    assert "CPU_DEMO=1: runtime tunables not applied" in log


def test_what_a_cpu_demo_run_does_to_the_host_is_said_exactly(launch, host):
    """It changes no kernel setting, and it does drop the page cache: said as such, not "this host is left as
    it is" followed by sysctl's `vm.drop_caches = 3`."""
    config = launch.tmp / "config_TEST_1x2x4.sh"
    config.write_text(config.read_text() + "export CPU_DEMO=1\n")
    result = launch.run(DROPCACHE_CMD="echo vm.drop_caches=3")  # sysctl's own echo
    assert result.returncode == 0, result.stdout + result.stderr
    log = (launch.logdir / f"{PREFIX}_1.log").read_text()
    assert "left as it is" not in log and "vm.drop_caches=3" not in log.splitlines()
    assert "no kernel setting is changed" in log
    assert "Clear page cache: sync, then echo vm.drop_caches=3 (frees cached file data" in log


@pytest.mark.parametrize("config", CPU_CONFIGS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_shipped_cpu_configs_leave_the_host_alone(launch, host, config):
    # what demo.sh and tests/test_small_default.py run, the latter without a fake TUNABLES_ROOT
    before = kernel_settings(host)
    result = launch.run(CONFIG_FILE=str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert kernel_settings(host) == before
    assert "runtime tunables not applied" in result.stdout
