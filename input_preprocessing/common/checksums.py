"""Checksums of prepared files: a whole file's digest (`file_hash`: MLCommons' md5 lists, our manifests'
sha256), and sampled block checksums, what the fast data checks use to see bytes overwritten in place (the
size kept) without reading whole files.

Data preparation records `sampled_sha256(path)` next to each file's size; the fast verify re-hashes the same
blocks: SAMPLES blocks of 64 KiB at fixed offsets spread evenly from the start to the end of the file (the
whole file when it is no larger than that), at most 512 KiB read per file (2 GB for BERT's 4,320 shards).
Damage that misses every sampled block (runs shorter than the gaps between them) is left to the full check,
which hashes every byte.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 64 << 10
SAMPLES = 8
KEY = "sampled_sha256"  # the field under which manifests record it
SKIPPED = "the sampled-block check was skipped (the full check reads every byte)"


def block_offsets(size: int) -> list[int]:
    """Where the sampled blocks of a file of `size` bytes start."""
    if size <= BLOCK * SAMPLES:
        return list(range(0, size, BLOCK))
    step = (size - BLOCK) / (SAMPLES - 1)
    return [round(i * step) for i in range(SAMPLES)]


def sampled_sha256(path: Path) -> str:
    """The sha256 of the file's size and its sampled blocks."""
    size = Path(path).stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        for offset in block_offsets(size):
            f.seek(offset)
            digest.update(f.read(BLOCK))
    return digest.hexdigest()


def file_hash(path: Path, algorithm: str = "md5", chunk: int = 1 << 22) -> str:
    """The hex digest of the whole file at `path` (`algorithm`: md5, sha256, any of hashlib's), read in
    chunks."""
    digest = hashlib.new(algorithm, usedforsecurity=False)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()
