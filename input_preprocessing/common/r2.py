"""MLCommons' R2 downloader (`mlc-r2-downloader.sh`), at one pinned commit, for every benchmark that fetches
MLCommons' data with it (BERT's inputs, Llama 3.1 8B's C4 and tokenizer).

MLCommons' READMEs run the script straight from `refs/heads/main`, which has changed its interface once
(`<name>.url` metadata became `<name>.uri`). Here it is fetched from a fixed commit of
github.com/mlcommons/r2-downloader: the `.uri` interface, public datasets downloaded without Cloudflare
Access, `-d DIR`, `wget --continue` per file, then `md5sum -c` of the dataset's list, exit status non-zero
on any failure. `R2_DOWNLOADER=/path/to/mlc-r2-downloader.sh` uses a local copy instead (an air-gapped
mirror, the tests' stand-in). The fetched copy's sha256 is logged, so a run's log names the exact script.

`remote_bytes(uri)` sizes a dataset before it is downloaded, the way the script finds its files: the `.uri`
holds the dataset's base URL, `<name>.md5` beside it lists the files, and a HEAD request per file gives its
length. None when any of that fails (no network, a dataset behind Cloudflare Access): the caller then checks
the disk against the size MLCommons or a submission published.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from input_preprocessing.common.runtime import PrepError, log

COMMIT = "b038b0cc1f71570388318ca41e68620b5ad7521e"
URL = f"https://raw.githubusercontent.com/mlcommons/r2-downloader/{COMMIT}/mlc-r2-downloader.sh"
ENV = "R2_DOWNLOADER"
SCRIPT = "mlc-r2-downloader.sh"


def _read(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read()


def remote_bytes(uri: str, timeout: float = 30.0) -> int | None:
    """The bytes of every file the dataset of `uri` (`.../metadata/<name>.uri`) lists, or None if unknown."""
    try:
        base = _read(uri, timeout).decode().strip().rstrip("/")
        listing = _read(uri.removesuffix(".uri") + ".md5", timeout).decode()
        total = 0
        for line in listing.splitlines():
            if not line.strip():
                continue
            rel = line.split(maxsplit=1)[1].strip().lstrip("*").removeprefix("./")
            head = urllib.request.Request(f"{base}/{urllib.request.pathname2url(rel)}", method="HEAD")
            with urllib.request.urlopen(head, timeout=timeout) as resp:
                total += int(resp.headers["Content-Length"])
        return total
    except (OSError, ValueError, KeyError, TypeError, IndexError, urllib.error.URLError):
        return None


def fetch(dest: Path, url: str = URL) -> Path:
    """The pinned script, fetched to `dest` (a failed fetch stops here, not in bash); its sha256 is logged."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            body = resp.read()
    except (OSError, urllib.error.URLError) as e:
        raise PrepError(
            f"could not fetch MLCommons' R2 downloader from {url}: {e}; "
            f"set {ENV}=/path/to/{SCRIPT} to use a local copy"
        ) from e
    if not body.startswith(b"#!"):
        raise PrepError(f"{url} did not return a shell script (first bytes {body[:40]!r}); set {ENV}=...")
    dest.write_bytes(body)
    log(f"[download] MLCommons' R2 downloader: {url} (sha256 {hashlib.sha256(body).hexdigest()})")
    return dest


def local_copy(environ: Mapping[str, str] = os.environ) -> Path | None:
    """`R2_DOWNLOADER`'s script, None when unset; a path that is not a file is an error."""
    value = environ.get(ENV)
    if not value:
        return None
    path = Path(value).resolve()
    if not path.is_file():
        raise PrepError(f"{ENV}={value}: no such file")
    return path


def downloader(workdir: Path, environ: Mapping[str, str] = os.environ) -> Path:
    """The script to run: `R2_DOWNLOADER`'s, else the pinned one fetched into `workdir`."""
    return local_copy(environ) or fetch(workdir / SCRIPT)
