"""`python -m training.doctor [--benchmark NAME] [PATH ...]`: what a user needs to trust this machine before
a run.

Platform (ROCm or CUDA), devices and memory, which accelerator libraries are importable, what each benchmark
(or the one named) would use here for each concern (its preflight's `report()`), free disk under the given
paths, and whether we are root or have passwordless sudo.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import shutil
import subprocess
import sys

import torch

from training import benchmarks
from training.common import backends


def report(paths: list[str], names: list[str]) -> list[tuple[str, str]]:
    rows = [
        ("python", sys.version.split()[0]),
        ("torch", torch.__version__),
        ("platform", backends.platform_name()),
        *host(),
    ]
    if torch.version.hip:
        rows.append(("rocm/hip", torch.version.hip))
    if torch.version.cuda:
        rows.append(("cuda", torch.version.cuda))
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    rows.append(("gpus", str(count)))
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        rows.append((f"gpu {i}", f"{props.name}, {props.total_memory / 2**30:.0f} GiB"))
    for name, ok in backends.available().items():
        rows.append((name, "importable" if ok else "not importable"))
    rows.append(("precision (auto)", backends.choose_precision("auto")))
    for name in names:
        try:
            chosen = importlib.import_module(benchmarks.BENCHMARKS[name].preflight).report()
        except Exception as err:  # noqa: BLE001 - the doctor reports what fails, it does not fail
            chosen = [("error", f"{type(err).__name__}: {err}")]
        rows += [(f"{name}: {key}", value) for key, value in chosen]
    for path in paths:
        if os.path.exists(path):
            rows.append((f"free disk {path}", f"{shutil.disk_usage(path).free / 2**30:.1f} GiB"))
        else:
            rows.append((f"free disk {path}", "path does not exist"))
    rows.append(("privileges", privileges()))
    return rows


def host() -> list[tuple[str, str]]:
    """The host's processor, memory and operating system, as a submission's system description names them."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return [
        ("cpu", cpu),
        ("logical cpus", str(os.cpu_count())),
        ("memory", f"{memory:.0f} GiB"),
        ("os", platform.platform()),
    ]


def privileges() -> str:
    if os.geteuid() == 0:
        return "root"
    if shutil.which("sudo"):
        ok = subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0
        return "passwordless sudo" if ok else "no root, sudo needs a password (tunables will be skipped)"
    return "no root, no sudo (tunables will be skipped)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.doctor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--benchmark", choices=list(benchmarks.BENCHMARKS), help="report this one only")
    parser.add_argument("paths", nargs="*", default=["."], help="folders whose free disk to report")
    args = parser.parse_args(argv)
    names = [args.benchmark] if args.benchmark else list(benchmarks.BENCHMARKS)
    for key, value in report(args.paths or ["."], names):
        print(f"{key:>30}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
