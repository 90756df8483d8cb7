"""MLCommons' R2 downloader as the data preparations get it (input_preprocessing/common/r2.py): from one
pinned commit, never a branch; a local copy through R2_DOWNLOADER; a dataset sized from its bucket before it
is fetched (file:// stands in for the bucket: no network here)."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from input_preprocessing.common import r2
from input_preprocessing.common.runtime import PrepError

ROOT = Path(__file__).resolve().parents[1]


def test_the_script_is_pinned_to_a_commit_everywhere():
    assert re.fullmatch(r"[0-9a-f]{40}", r2.COMMIT)
    assert r2.URL.startswith(f"https://raw.githubusercontent.com/mlcommons/r2-downloader/{r2.COMMIT}/")
    paths = ["input_preprocessing", "training", "scripts", "*.sh"]
    tracked = subprocess.run(
        ["git", "ls-files", *paths], cwd=ROOT, capture_output=True, text=True, check=True
    )
    tracked = tracked.stdout.split()
    moving = [f for f in tracked if "r2-downloader/refs/heads" in (ROOT / f).read_text(errors="replace")]
    assert moving == []


def test_fetch_writes_the_script_and_logs_its_sha256(tmp_path, capsys):
    script = tmp_path / "r2.sh"
    script.write_text("#!/bin/bash\necho hi\n")
    got = r2.fetch(tmp_path / "got" / r2.SCRIPT, script.as_uri())
    assert got.read_text() == "#!/bin/bash\necho hi\n"
    assert hashlib.sha256(script.read_bytes()).hexdigest() in capsys.readouterr().err
    with pytest.raises(
        PrepError, match="set R2_DOWNLOADER=/path/to/mlc-r2-downloader.sh to use a local copy"
    ):
        r2.fetch(tmp_path / "x.sh", (tmp_path / "missing.sh").as_uri())
    (tmp_path / "page.html").write_text("<html>rate limited</html>")
    with pytest.raises(PrepError, match="did not return a shell script"):
        r2.fetch(tmp_path / "y.sh", (tmp_path / "page.html").as_uri())


def test_a_local_copy_is_used_when_named(tmp_path):
    script = tmp_path / "mine.sh"
    script.write_text("#!/bin/bash\n")
    assert r2.local_copy({}) is None
    assert r2.downloader(tmp_path / "work", {r2.ENV: str(script)}) == script
    with pytest.raises(PrepError, match=r"R2_DOWNLOADER=/nowhere/r2.sh: no such file"):
        r2.local_copy({r2.ENV: "/nowhere/r2.sh"})


def test_a_dataset_is_sized_from_its_bucket(tmp_path):
    """As the downloader finds the files: `<name>.uri` holds the base URL, `<name>.md5` beside it the list."""
    data = tmp_path / "bucket" / "set"
    (data / "sub").mkdir(parents=True)
    (data / "a.bin").write_bytes(bytes(1000))
    (data / "sub" / "b c.bin").write_bytes(bytes(234))
    meta = tmp_path / "metadata"
    meta.mkdir()
    (meta / "set.uri").write_text(data.as_uri() + "\n")
    (meta / "set.md5").write_text(f"{'0' * 32}  ./a.bin\n{'1' * 32}  sub/b c.bin\n")
    assert r2.remote_bytes(f"{meta.as_uri()}/set.uri") == 1234
    (data / "a.bin").unlink()
    assert r2.remote_bytes(f"{meta.as_uri()}/set.uri") is None  # a listed file the bucket lacks
    assert r2.remote_bytes(f"{meta.as_uri()}/other.uri") is None
