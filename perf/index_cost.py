"""What building the Llama 3.1 8B training-sample index costs at MLCommons' C4 size, on the CPU: the index is
built for MAX_STEPS x GBS samples as NeMo builds it (`training.llama31_8b.data.build_train_dataset`), once per
seed, on rank 0 before init_start.

    python -m perf.index_cost /scratch/folder --gbs 32 [--steps 1200000]

The input is a synthetic `.idx` with the real C4 train file's document and token counts (NVIDIA's
expected-mounts-8b.csv: .idx 912,172,262 bytes -> 45,608,611 documents; .bin 83,976,774,280 bytes of int32
-> 20,994,193,570 tokens), document lengths drawn log-normal; the `.bin` is a sparse file (building the index
reads only the `.idx`). Prints the build's seconds, the process's peak memory and the cache's size on disk.
"""

from __future__ import annotations

import argparse
import resource
import struct
import time
from pathlib import Path

import numpy as np

from training.llama31_8b import data

DOCS, TOKENS = 45_608_611, 20_994_193_570
VOCAB, SEQ, SEED = 128_256, 8192, 1234


def write_synthetic(prefix: Path) -> None:
    """`prefix`.idx in megatron-core's indexed format (int32 tokens, one sequence a document) and a sparse
    `prefix`.bin of the size those documents take."""
    lengths = np.random.default_rng(0).lognormal(5.6, 0.9, DOCS)
    lengths = np.maximum(1, np.round(lengths * TOKENS / lengths.sum())).astype(np.int64)
    short = TOKENS - int(lengths.sum())
    lengths[: abs(short)] += np.sign(short)
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1] * 4)]).astype(np.int64)
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 4))
        f.write(struct.pack("<Q", DOCS) + struct.pack("<Q", DOCS + 1))
        f.write(lengths.astype(np.int32).tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(DOCS + 1, dtype=np.int64).tobytes())
    with open(f"{prefix}.bin", "wb") as f:
        f.truncate(TOKENS * 4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="scratch space: the synthetic .idx (1 GB) and the index cache")
    ap.add_argument("--gbs", type=int, required=True)
    ap.add_argument("--steps", type=int, default=1_200_000, help="MAX_STEPS (the 8B rules' 1.2 M)")
    args = ap.parse_args(argv)
    args.folder.mkdir(parents=True, exist_ok=True)
    prefix = args.folder / "c4-synthetic"
    if not Path(f"{prefix}.idx").exists():
        write_synthetic(prefix)
    cache = args.folder / f"cache_{args.gbs}_{args.steps}"
    start = time.time()
    samples = len(data.build_train_dataset(prefix, SEQ, args.steps * args.gbs, SEED, cache, VOCAB))
    took = time.time() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    size = sum(p.stat().st_size for p in cache.iterdir()) / 2**30
    print(
        f"GBS {args.gbs}, {args.steps} steps: {samples} samples, built in {took:.0f} s, peak memory "
        f"{peak:.1f} GiB, cache {size:.2f} GiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
