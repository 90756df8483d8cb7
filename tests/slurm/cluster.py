"""A real SLURM cluster on this machine for the run.sub test: Debian's slurm-wlm and munge, started as root
from a temporary folder, with two nodes (two slurmd, `slurmd -N nodeX`, each on its own port of 127.0.0.1).

Everything lives in that folder (slurm.conf, munge key and socket, state, spool, logs), the ports are free
ones picked at start, and the daemons run in the foreground as children of this process: `stop` ends exactly
those, by their pids, and reaps them.
cgroup plugins are off (proctrack/linuxproc, task/none), so no cgroup setup or systemd is needed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

PACKAGES = {"slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client", "munged": "munge"}
SBIN_PATH = f"{os.environ.get('PATH', '/usr/bin:/bin')}:/usr/local/sbin:/usr/sbin:/sbin"  # the daemons' place

SLURM_CONF = """\
ClusterName=mlperftest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class Unavailable(Exception):
    """SLURM cannot run here; the message says why (the test skips with it)."""


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def ensure_packages() -> None:
    missing = sorted(
        {pkg for binary, pkg in PACKAGES.items() if shutil.which(binary, path=SBIN_PATH) is None}
    )
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise Unavailable(f"{' '.join(missing)} not installed and no apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
    ):
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise Unavailable(f"{' '.join(argv)} failed: {result.stderr.strip()[-400:]}")


class Cluster:
    def __init__(self, root: Path, nodes: int = 2, cpus: int | None = None):
        self.root = root
        self.names = [f"node{i + 1}" for i in range(nodes)]
        self.cpus = cpus or os.cpu_count() or 1
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "PATH": SBIN_PATH, "SLURM_CONF": str(self.conf)}
        self.daemons: list[subprocess.Popen] = []

    def start(self, timeout: float = 60) -> None:
        for sub in ("munge", "state", "spool", "log", "run"):
            (self.root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = self.root / "munge" / "munge.sock"
        self._daemon(
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={sock}",
                f"--key-file={key}",
                f"--pid-file={self.root}/run/munged.pid",
                f"--seed-file={self.root}/munge/seed",
                f"--log-file={self.root}/log/munged.log",
            ]
        )
        self._wait_for(sock.exists, "munged's socket")
        ctld_port, *node_ports = free_ports(1 + len(self.names))
        host = socket.gethostname()
        nodes = "\n".join(
            f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={self.cpus}"
            for name, port in zip(self.names, node_ports)
        )
        self.conf.write_text(SLURM_CONF.format(host=host, ctld_port=ctld_port, root=self.root, nodes=nodes))
        self._daemon(["slurmctld", "-D", "-f", str(self.conf)])
        for name in self.names:
            self._daemon(["slurmd", "-D", "-f", str(self.conf), "-N", name])

        def all_idle() -> bool:
            states = self.sinfo()
            return len(states) == len(self.names) and all(s == "idle" for s in states.values())

        self._wait_for(all_idle, "the nodes to be idle", timeout)

    def _daemon(self, argv: list[str]) -> None:
        """Start a daemon in the foreground, as a child of this process (its output in log/)."""
        with open(self.root / "log" / f"{argv[0]}.{len(self.daemons)}.out", "w") as out:
            self.daemons.append(subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT))

    def _wait_for(self, predicate, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            ended = [str(d.args[0]) for d in self.daemons if d.poll() is not None]
            if ended:
                raise Unavailable(f"{', '.join(ended)} exited at start\n{self.logs()}")
            time.sleep(0.3)
        raise Unavailable(
            f"timed out after {timeout:.0f} s waiting for {what}: {self.sinfo()}\n{self.logs()}"
        )

    def sinfo(self) -> dict[str, str]:
        result = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"], env=self.env, capture_output=True, text=True, timeout=30
        )
        return dict(line.split() for line in result.stdout.splitlines() if len(line.split()) == 2)

    def logs(self, tail: int = 1500) -> str:
        files = sorted((self.root / "log").glob("*.*"))
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}" for p in files)

    def stop(self) -> None:
        """Cancel what is left of the jobs, then end the daemons started here (TERM, then KILL), reaped."""
        if self.conf.exists() and any(d.poll() is None for d in self.daemons):
            subprocess.run(
                ["scancel", "--user=root", "--full"], env=self.env, capture_output=True, timeout=30
            )
        for daemon in reversed(self.daemons):  # slurmd, slurmctld, then munged
            if daemon.poll() is None:
                daemon.terminate()
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=15)
