"""A real container engine for the launcher tests: podman from Debian's packages, and images built here.

No registry is reachable, so the base image is made locally: a Debian rootfs (`debootstrap --variant=minbase`,
with python3) imported with `podman import`, plus a venv holding the CPU build of torch, standing in for the
vendor's PyTorch image. `Dockerfile.bert` is then built on top of it with `--build-arg BASE_IMAGE=...`, so its
own steps (pip install of requirements.txt, COPY of the repo) really run.

Caching: the rootfs tarball lies in CACHE keyed by what goes into it; the images stay in podman's storage,
tagged by the hash of their inputs, and podman's layer cache makes a rebuild of Dockerfile.bert cheap when
only the code changed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.cache import CACHE, REPO

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
APT_PACKAGES = ["podman", "runc", "catatonit", "debootstrap"]
TORCH = "torch==2.13.0"  # the CPU build on this kind of machine's disk (requirements-dev.txt pins the same)
IMAGE_REPO = "localhost/mlperf-repro-test"

# Engine settings that work on these machines (cgroup v1, no systemd, no ulimit changes allowed), given
# through CONTAINERS_CONF so that the host's /etc/containers is left as it is.
CONTAINERS_CONF = """\
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
"""

# The vendor base stand-in: the minbase rootfs plus a venv with torch on PATH (as python3). The host's CA
# bundle goes in too: where the network passes through a TLS-intercepting proxy, pip inside the build
# needs it, exactly as on a site with its own CA.
TORCH_BASE = """\
ARG MINBASE
FROM ${MINBASE}
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
RUN --mount=type=bind,source=wheels,target=/tmp/wheels \\
    python3 -m venv /opt/venv \\
    && /opt/venv/bin/python -m pip install --no-cache-dir --no-index --find-links /tmp/wheels TORCH
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
""".replace("TORCH", TORCH)
CA_BUNDLE = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")


class Unavailable(Exception):
    """No container engine can run here; the message says why (the tests skip with it)."""


def log(msg: str) -> None:
    print(f"[containers] {msg}", file=sys.stderr, flush=True)


def run(*argv: str, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, timeout=timeout, **kw)


def _apt_install(packages: list[str]) -> None:
    if shutil.which("apt-get") is None:
        raise Unavailable(f"{' '.join(packages)} not installed and no apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        run("apt-get", "update", "-q", env=env, capture_output=True, timeout=300)
        run(
            "apt-get",
            "install",
            "-y",
            "-q",
            "--no-install-recommends",
            *packages,
            env=env,
            capture_output=True,
            timeout=600,
        )
    except subprocess.SubprocessError as err:
        out = getattr(err, "stderr", b"") or b""
        raise Unavailable(f"apt-get install {' '.join(packages)} failed: {out.decode()[-400:]}") from err


def ensure_podman(workdir: Path) -> dict[str, str]:
    """Install podman (root, apt) where missing; return the environment that runs it. Raises Unavailable."""
    if not sys.platform.startswith("linux"):
        raise Unavailable("podman tests need Linux")
    if os.geteuid() != 0:
        raise Unavailable("podman tests run as root (rootful podman with cgroupfs); not root here")
    missing = [p for p in APT_PACKAGES if not _have(p)]
    if missing:
        log(f"installing {' '.join(missing)} with apt-get")
        _apt_install(missing)
    conf = workdir / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    probe = subprocess.run(
        ["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.returncode != 0:
        raise Unavailable(f"podman cannot run here: {probe.stderr.strip()[-400:]}")
    return env


SBIN_PATH = (
    f"{os.environ.get('PATH', '/usr/bin:/bin')}:/usr/local/sbin:/usr/sbin:/sbin"  # debootstrap's place
)


def _have(package: str) -> bool:
    binary = {"catatonit": "/usr/libexec/podman/catatonit"}.get(package, package)
    return (
        Path(binary).exists() if binary.startswith("/") else shutil.which(binary, path=SBIN_PATH) is not None
    )


def _image_exists(env, ref: str) -> bool:
    return subprocess.run(["podman", "image", "exists", ref], env=env).returncode == 0


def _minbase(env, work: Path) -> str:
    """The Debian minbase image with python3 (rootfs tarball cached in CACHE)."""
    key = hashlib.sha256(
        f"{SUITE} {MIRROR} minbase python3 python3-venv ca-certificates".encode()
    ).hexdigest()
    ref = f"{IMAGE_REPO}/debian-minbase:{key[:12]}"
    if _image_exists(env, ref):
        return ref
    tarball = CACHE / f"debian-{SUITE}-minbase-python-{key[:12]}.tar"
    if not tarball.exists():
        rootfs = work / "rootfs"
        start = time.monotonic()
        log(f"debootstrap {SUITE} into {rootfs} (once; cached as {tarball})")
        run(
            shutil.which("debootstrap", path=SBIN_PATH) or "debootstrap",
            "--variant=minbase",
            "--include=python3,python3-venv,ca-certificates",
            SUITE,
            str(rootfs),
            MIRROR,
            capture_output=True,
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        tarball.parent.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(".partial")
        run("tar", "-C", str(rootfs), "-cf", str(partial), ".")
        partial.rename(tarball)
        shutil.rmtree(rootfs)
        log(f"debootstrap took {time.monotonic() - start:.0f} s")
    run("podman", "import", "--change", 'CMD ["/bin/bash"]', str(tarball), ref, env=env, capture_output=True)
    return ref


def torch_base(env, work: Path) -> str:
    """The stand-in for a vendor PyTorch image: minbase + /opt/venv with torch (CPU) as python3."""
    minbase = _minbase(env, work)
    ca = CA_BUNDLE.read_bytes() if CA_BUNDLE.exists() else b""
    key = hashlib.sha256(minbase.encode() + TORCH_BASE.encode() + ca).hexdigest()[:12]
    ref = f"{IMAGE_REPO}/torch-base:{key}"
    if _image_exists(env, ref):
        return ref
    ctx = work / "torch-base"
    (ctx / "wheels").mkdir(parents=True)
    (ctx / "Containerfile").write_text(TORCH_BASE)
    (ctx / "ca-certificates.crt").write_bytes(ca)
    log(f"pip download {TORCH} for the base image")
    run(
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--only-binary=:all:",
        "--dest",
        str(ctx / "wheels"),
        TORCH,
        capture_output=True,
    )
    start = time.monotonic()
    run(
        "podman",
        "build",
        "--format=docker",
        "--network=host",
        "--build-arg",
        f"MINBASE={minbase}",
        "-t",
        ref,
        str(ctx),
        env=env,
        capture_output=True,
    )
    log(f"torch base image built in {time.monotonic() - start:.0f} s")
    shutil.rmtree(ctx)
    return ref


def _image_id(env, ref: str) -> str:
    result = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", ref], env=env, capture_output=True, text=True
    )
    return result.stdout.strip() if result.returncode == 0 else ""


def build_bert(env, base: str) -> tuple[str, float, str]:
    """`podman build -f Dockerfile.bert` of this checkout on `base`: (image, seconds, build output). The
    previous build's image is removed when this one replaces it (its cached layers stay while shared)."""
    ref = f"{IMAGE_REPO}/bert:latest"
    previous = _image_id(env, ref)
    start = time.monotonic()
    # --format=docker: the OCI format drops SHELL (and with it `-o pipefail`); docker build keeps it.
    result = subprocess.run(
        [
            "podman",
            "build",
            "--format=docker",
            "--network=host",
            "--build-arg",
            f"BASE_IMAGE={base}",
            "-f",
            "Dockerfile.bert",
            "-t",
            ref,
            ".",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    seconds = time.monotonic() - start
    if result.returncode != 0:
        raise AssertionError(
            f"podman build -f Dockerfile.bert failed:\n{result.stdout[-3000:]}{result.stderr}"
        )
    if previous and previous != _image_id(env, ref):
        subprocess.run(["podman", "rmi", previous], env=env, capture_output=True)
    return ref, seconds, result.stdout + result.stderr
