"""One image tag per benchmark everywhere: every `mlperf/<name>` image that a document, config or script names
(a `docker build -t`, a `CONT=`, a `docker run`) is the one `Dockerfile.<name>` builds, so a user who copies a
command from one page finds the image another page built."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TAG = re.compile(r"\bmlperf/([A-Za-z0-9_.-]+)")


def named_images(root: Path) -> dict[str, set[str]]:
    """Image name -> the tracked files that name it."""
    files = subprocess.run(["git", "-C", str(root), "ls-files"], capture_output=True, text=True, check=True)
    found: dict[str, set[str]] = {}
    for rel in files.stdout.splitlines():
        path = root / rel
        if path.suffix in (".md", ".sh", ".sub", ".py") or path.name.startswith("Dockerfile"):
            for name in TAG.findall(path.read_text(errors="replace")):
                found.setdefault(name.split(":")[0], set()).add(rel)
    return found


def test_every_image_named_is_the_one_its_dockerfile_builds():
    built = {p.name.removeprefix("Dockerfile.") for p in ROOT.glob("Dockerfile.*")}
    assert built == {"bert", "llama8b", "llama70b", "flux1"}
    named = named_images(ROOT)
    assert set(named) <= built, {name: sorted(where) for name, where in named.items() if name not in built}
