"""One launcher per LOGDIR: two started together, the second refuses in one line naming the first and writes
nothing; the lock ends with the processes that hold it (no stale lock after SIGKILL); log numbers are reserved
atomically, so even writers past the lock never share a log."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

from tests.launch.helpers import PREFIX, REPO, process_alive, stop_and_wait, wait_for


def _refusal(out: str) -> str:
    errors = [line for line in out.splitlines() if "error" in line]
    assert len(errors) == 1, out
    return errors[0]


def test_two_launchers_started_together_one_refuses(launch):
    env = {"FAKE_SLEEP_TAGS": f"{PREFIX}_1 {PREFIX}_2"}  # the winner's run lasts until it is stopped
    procs = [launch.start(**env), launch.start(**env)]
    wait_for(lambda: any(p.poll() is not None for p in procs), what="one launcher to refuse")
    loser = next(p for p in procs if p.poll() is not None)
    winner = next(p for p in procs if p is not loser)
    out, _ = loser.communicate()
    assert loser.returncode == 2, out
    line = _refusal(out)
    assert line.startswith(f"run_with_docker.sh: error: LOGDIR={launch.logdir} is in use by run_with_")
    assert f"process {winner.pid} on {socket.gethostname()}, started 20" in line and " UTC" in line
    assert line.endswith("wait for it to end, or give another LOGDIR")
    # the loser wrote nothing: one preflight, one log, the holder is the winner
    pidfile = launch.tmp / "state" / f"{PREFIX}_1.pid"
    wait_for(pidfile.exists, what="the winner's run to start")
    assert len(launch.module_calls("training.preflight")) == 1 and launch.logs() == [f"{PREFIX}_1.log"]
    assert (launch.logdir / ".launcher.holder").read_text().split("\t")[1] == str(winner.pid)
    rc, out = stop_and_wait(winner, signal.SIGTERM)
    assert rc == 143, out
    # the lock went with it: the next launcher runs
    result = launch.run()
    assert result.returncode == 0, result.stderr
    assert launch.logs() == [f"{PREFIX}_1.log", f"{PREFIX}_2.log"]


def test_a_killed_launcher_leaves_no_stale_lock(launch):
    proc = launch.start(FAKE_SLEEP_TAGS=f"{PREFIX}_1")
    pidfile = launch.tmp / "state" / f"{PREFIX}_1.pid"
    wait_for(pidfile.exists, what="the run to start")
    proc.kill()  # SIGKILL: no trap runs
    proc.wait(timeout=10)
    proc.stdout.close()  # (what the run started still writes there)
    # the run it started goes on, writing into LOGDIR: it holds the lock, and the refusal says so
    result = launch.run()
    assert result.returncode == 2
    assert "(that process has ended; what it started still runs and holds the lock)" in _refusal(
        result.stderr
    )
    training = int(pidfile.read_text())
    os.killpg(os.getpgid(training), signal.SIGKILL)  # the run's process group, as a user's kill would
    wait_for(lambda: not process_alive(training), timeout=5, what="the run to end")
    result = launch.run()
    assert result.returncode == 0, result.stderr
    assert launch.logs() == [f"{PREFIX}_1.log", f"{PREFIX}_2.log"]


def test_log_numbers_are_reserved_atomically(tmp_path):
    """Eight writers past the lock, reserving at once from the same highest index: eight logs, none shared."""
    common = REPO / "scripts" / "run_common.sh"
    script = f'source "{common}"; RUNNER=t LOGDIR=$1 _prefix=p; reserve_log; echo "${{_tag}}"'
    procs = [
        subprocess.Popen(["bash", "-c", script, "w", str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    tags = [p.communicate(timeout=30)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(tags, key=lambda t: int(t[2:])) == [f"p_{i}" for i in range(1, 9)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"p_{i}.log" for i in range(1, 9))
