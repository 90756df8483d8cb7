"""Makes `numpy1_golden/{train,validation}.npy`: AMD's and NVIDIA's conversion of the GovReport parquet files
(pandas' `read_parquet`, one `{input_ids, loss_mask, seq_start_id}` dict per row, `np.save`), run under the
numpy 1.x their images have, on small parquet files of the same schema. `test_layout.py` checks that
`layout.save_rows` writes these bytes under whichever numpy runs the tests. Made with numpy 1.26.4,
pandas 2.2.3 and pyarrow 17.0.0:

    python tests/llama2_70b_lora_data/make_numpy1_golden.py tests/llama2_70b_lora_data/numpy1_golden
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

SHAPES = {"train": (5, 80), "validation": (60, 8)}  # > 255 bytes a row; > 255 memo entries


def columns(split: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The parquet's columns: input_ids (int32) and labels (int64, -100 on a random prefix) of each row."""
    rows, length = SHAPES[split]
    rng = np.random.default_rng(len(split))
    ids = [rng.integers(0, 32000, length).astype(np.int32) for _ in range(rows)]
    labels = []
    for row in ids:
        label = row.astype(np.int64)
        label[: rng.integers(0, length)] = -100
        labels.append(label)
    return ids, labels


def main(outdir: Path) -> None:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    outdir.mkdir(parents=True, exist_ok=True)
    for split in SHAPES:
        ids, labels = columns(split)
        parquet = outdir / f"{split}.parquet"
        table = pa.table(
            {
                "input_ids": pa.array([r.tolist() for r in ids], type=pa.list_(pa.int32())),
                "labels": pa.array([r.tolist() for r in labels], type=pa.list_(pa.int64())),
            }
        )
        pq.write_table(table, parquet)
        frame = pd.read_parquet(parquet)
        rows = frame.apply(
            lambda row: {
                "input_ids": row["input_ids"],
                "loss_mask": [int(x != -100) for x in row["labels"]],
                "seq_start_id": [0],
            },
            axis=1,
        ).tolist()
        np.save(outdir / split, rows)
        parquet.unlink()
    print(f"numpy {np.__version__}, pandas {pd.__version__}, pyarrow {pa.__version__}: {outdir}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
