"""The few Hugging Face Hub calls the preparation makes, through `huggingface_hub` (imported when called).

`list_files` asks the Hub for a revision's files with their sizes and LFS sha256; `fetch` downloads one file
into a folder with `hf_hub_download`, which resumes a partial download and shows the bytes as they arrive, and
skips a file already there at its full size. Hub errors become `PrepError`s that say what to do.
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from input_preprocessing.common.runtime import PrepError


@dataclass(frozen=True, order=True)
class RemoteFile:
    name: str  # the path in the repository
    size: int
    sha256: str | None  # LFS files only


def token() -> str | None:
    """HF_TOKEN, or the token `hf auth login` saved."""
    import huggingface_hub

    return huggingface_hub.get_token()


@contextlib.contextmanager
def _explained(repo_id: str) -> Iterator[None]:
    try:
        yield
    except PrepError:
        raise
    except Exception as err:  # noqa: BLE001 - every Hub failure is reported by name, with what to do
        kinds = {cls.__name__ for cls in type(err).__mro__}
        url = f"https://huggingface.co/{repo_id}"
        if "GatedRepoError" in kinds:
            why = f"is gated: accept its licence at {url} with the account whose HF_TOKEN you pass"
        elif "RepositoryNotFoundError" in kinds:
            why = "was not found, or HF_TOKEN does not give access to it"
        elif "RevisionNotFoundError" in kinds:
            why = "has no such revision"
        else:
            why = f"could not be read from the Hugging Face Hub ({type(err).__name__}: {err})"
        raise PrepError(f"{repo_id} {why}") from err


def list_files(
    repo_id: str, repo_type: str, revision: str, patterns: Sequence[str], token: str | None
) -> tuple[str, list[RemoteFile]]:
    """(the revision's commit, its files matching `patterns`, sorted by name)."""
    import huggingface_hub

    with _explained(repo_id):
        info = huggingface_hub.HfApi().repo_info(
            repo_id, repo_type=repo_type, revision=revision, files_metadata=True, token=token
        )
    files = [
        RemoteFile(s.rfilename, int(s.size), s.lfs.sha256 if s.lfs else None)
        for s in info.siblings
        if any(fnmatch.fnmatch(s.rfilename, p) for p in patterns)
    ]
    return info.sha, sorted(files)


def fetch(
    repo_id: str,
    repo_type: str,
    revision: str,
    name: str,
    local_dir: Path,
    remote: Sequence[RemoteFile],
    token: str | None,
) -> Path:
    """`local_dir/name`, downloaded unless already there at its full size; its size checked."""
    expected = next((f for f in remote if f.name == name), None)
    if expected is None:
        raise PrepError(f"{repo_id}@{revision} has no file {name}")
    path = local_dir / name
    if not (path.is_file() and path.stat().st_size == expected.size):
        import huggingface_hub

        with _explained(repo_id):
            got = huggingface_hub.hf_hub_download(
                repo_id, name, repo_type=repo_type, revision=revision, local_dir=local_dir, token=token
            )
        path = Path(got)
    size = path.stat().st_size
    if size != expected.size:
        raise PrepError(f"{path}: {size:,} bytes, the Hub says {expected.size:,}; delete it and run again")
    return path
