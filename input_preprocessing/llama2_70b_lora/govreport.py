"""The MLCommons GovReport set: the Hugging Face parquet files AMD and NVIDIA download, into `train.npy` and
`validation.npy` (the layout in `layout.py`), checked against AMD's and NVIDIA's checksums and sizes.

The parquet files hold rows already tokenized (Llama 2's tokenizer) and packed to 8,192 tokens: `input_ids`
(int32) and `labels` (-100 where no loss is taken). A row becomes `{input_ids, loss_mask = labels != -100,
seq_start_id = [0]}`, as in their `convert_dataset.py`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from input_preprocessing.common.checksums import KEY, file_hash, sampled_sha256
from input_preprocessing.common.runtime import PrepError, log
from input_preprocessing.llama2_70b_lora import hub, layout

REPO_ID = "regisss/scrolls_gov_report_preprocessed_mlperf_2"
REVISION = "21ff1233ee3e87bc780ab719c755170148aba1cb"  # the revision AMD's and NVIDIA's scripts pin
PARQUET = {
    "train": "data/train-00000-of-00001.parquet",
    "validation": "data/validation-00000-of-00001.parquet",
}
PARQUET_DIR_MD5 = "682a5f40b790a56751bf8303554efc08"  # AMD's download_dataset.py (hash.py over both files)
NPY_DIR_MD5 = "02e1f87d26ece4943a47bedcad0da5d4"  # AMD's convert_dataset.py (over train.npy + validation.npy)
SEQ_LENGTH = 8192
VOCAB_SIZE = 32000  # Llama 2's tokenizer
SPLITS = {  # rows (MLPerf's train_samples / eval_samples) and NVIDIA's expected-mounts.csv sizes
    "train": {"file": "train.npy", "rows": 3901, "size": 192_151_239},
    "validation": {"file": "validation.npy", "rows": 173, "size": 8_521_136},
}
DOWNLOAD_DIR = "gov_report"  # under the output folder; removed once the .npy files are verified


def rows_from_columns(
    ids: np.ndarray, ids_offsets: np.ndarray, labels: np.ndarray, labels_offsets: np.ndarray, where: str = ""
) -> list[dict]:
    """The rows of a parquet split, from its two list columns as flat values + offsets."""
    if len(ids_offsets) != len(labels_offsets) or not np.array_equal(
        np.diff(ids_offsets), np.diff(labels_offsets)
    ):
        raise PrepError(f"{where}: input_ids and labels differ in length in some row")
    if ids.size and (ids.min() < 0 or ids.max() > np.iinfo(np.int32).max):
        raise PrepError(f"{where}: token ids outside int32")
    ids = ids.astype(layout.TOKEN_DTYPE, copy=False)  # one dtype object for every row, as pandas gives
    rows = []
    for i in range(len(ids_offsets) - 1):
        a, b = int(ids_offsets[i]), int(ids_offsets[i + 1])
        la, lb = int(labels_offsets[i]), int(labels_offsets[i + 1])
        rows.append(layout.make_row(ids[a:b], labels[la:lb] != -100, [0]))
    return rows


def read_parquet_rows(path: Path) -> list[dict]:
    """The rows of one parquet split (pyarrow reads it: no pandas needed)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise PrepError(
            "pyarrow is needed to read the GovReport parquet files: pip install pyarrow"
        ) from None
    table = pq.read_table(path, columns=["input_ids", "labels"])
    columns = []
    for name in ("input_ids", "labels"):
        col = table.column(name).combine_chunks()
        if col.null_count or col.values.null_count:
            raise PrepError(f"{path}: column {name} has null values")
        columns += [col.values.to_numpy(), col.offsets.to_numpy()]
    return rows_from_columns(*columns, where=str(path))


def convert(parquet: Path, npy: Path, rows: int, seq_length: int) -> dict:
    """One split to `.npy`; the row count and row length checked first. Returns its meta entry."""
    data = read_parquet_rows(parquet)
    if len(data) != rows:
        raise PrepError(f"{parquet}: {len(data)} rows, expected {rows}")
    bad = [i for i, row in enumerate(data) if len(row["input_ids"]) != seq_length]
    if bad:
        raise PrepError(f"{parquet}: {len(bad)} rows are not {seq_length} tokens long (first: row {bad[0]})")
    size = layout.save_rows(npy, data)
    return {
        "file": npy.name,
        "rows": rows,
        "sequences": rows,
        "size": size,
        "md5": file_hash(npy),
        KEY: sampled_sha256(npy),
    }


def prepare(data_dir: Path, download_root: Path, remote: list[hub.RemoteFile], token: str | None) -> dict:
    """Download the parquet files (resuming), check AMD's checksum, convert both splits, check AMD's
    checksum of the result. Returns the data's meta.json content (`remote`: the dataset's files)."""
    staging = download_root / DOWNLOAD_DIR
    md5s = []
    for name in PARQUET.values():
        path = hub.fetch(REPO_ID, "dataset", REVISION, name, staging, remote, token)
        md5s.append(file_hash(path))
    got = layout.directory_md5(md5s)
    if got != PARQUET_DIR_MD5:
        raise PrepError(
            f"{staging}: checksum mismatch: the parquet files' md5 is {got}, AMD's scripts expect "
            f"{PARQUET_DIR_MD5}; delete {staging} and run again"
        )
    log(f"[data] parquet files verified (md5 {got}); converting to .npy")
    splits = {}
    for split, spec in SPLITS.items():
        splits[split] = convert(staging / PARQUET[split], data_dir / spec["file"], spec["rows"], SEQ_LENGTH)
        log(f"[data] {data_dir / spec['file']}: {spec['rows']} rows, {splits[split]['size']:,} bytes")
    got = layout.directory_md5(s["md5"] for s in splits.values())
    if got != NPY_DIR_MD5:
        raise PrepError(
            f"{data_dir}: checksum mismatch: train.npy + validation.npy have md5 {got}, AMD's converter "
            f"gives {NPY_DIR_MD5} (the parquet files verified, so this is a bug here: please report it)"
        )
    shutil.rmtree(staging)
    return {
        "kind": "mlperf",
        "source": f"hf://datasets/{REPO_ID}@{REVISION}",
        "tokenizer": "Llama 2 (meta-llama/Llama-2-70b-hf)",
        "vocab_size": VOCAB_SIZE,
        "seq_length": SEQ_LENGTH,
        "directory_md5": got,
        "splits": splits,
    }
