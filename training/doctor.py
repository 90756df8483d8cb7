"""`python -m training.doctor [PATH ...]`: what a user needs to trust this machine before a run.

Platform (ROCm or CUDA), devices and memory, which accelerator libraries are importable and what each
concern will use, free disk under the given paths, and whether we are root or have passwordless sudo.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import torch

from training.common import backends


def report(paths: list[str]) -> list[tuple[str, str]]:
    rows = [
        ("python", sys.version.split()[0]),
        ("torch", torch.__version__),
        ("platform", backends.platform_name()),
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
    rows.append(("attention backend", backends.choose_attention("auto")))
    rows.append(("precision (auto)", backends.choose_precision("auto")))
    fp8 = "transformer_engine" if backends.importable("transformer_engine") else (
        "torchao" if backends.importable("torchao") else "off")  # fmt: skip
    rows.append(("fp8 backend", fp8))
    rows.append(("fused optimizer", "apex" if backends.importable("apex") else "torch foreach (ours)"))
    for path in paths:
        if os.path.exists(path):
            rows.append((f"free disk {path}", f"{shutil.disk_usage(path).free / 2**30:.1f} GiB"))
        else:
            rows.append((f"free disk {path}", "path does not exist"))
    rows.append(("privileges", privileges()))
    return rows


def privileges() -> str:
    if os.geteuid() == 0:
        return "root"
    if shutil.which("sudo"):
        ok = subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0
        return "passwordless sudo" if ok else "no root, sudo needs a password (tunables will be skipped)"
    return "no root, no sudo (tunables will be skipped)"


def main(argv: list[str]) -> int:
    for key, value in report(argv or ["."]):
        print(f"{key:>22}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
