"""Raw text -> Megatron indexed dataset (`PREFIX.bin` + `PREFIX.idx`), the format of MLCommons' C4 data.

    python -m input_preprocessing.llama31_8b.preprocess --input c4-validation.json.gz --tokenizer /model \\
        --output-prefix /data/c4-validation_text_document [--json-key text] [--workers 8]

Input: JSON lines (`.json`/`.jsonl`, optionally `.gz`; one document per line, its text under --json-key) or
plain text (`.txt`: one document per blank-line-separated block). The tokenizer is any Hugging Face tokenizer
folder (its `tokenizer.json`). Each document is encoded without special tokens and followed by the
end-of-document token, as NeMo's `preprocess_data_for_megatron.py --append-eod` does for MLPerf's C4
(one sequence per document). Writing goes through megatron-core's `IndexedDatasetBuilder`, so what
megatron-core writes is exactly what training reads; the token dtype is megatron's choice for the vocabulary
(uint16 below 65,500 tokens, int32 above).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from input_preprocessing.common.tokenizer import HFTokenizer
from training.common.indexed import quiet_megatron


def read_documents(path: Path, json_key: str = "text") -> Iterator[str]:
    """Documents of one input file, in file order."""
    path = Path(path)
    suffixes = path.suffixes
    opener = gzip.open if suffixes and suffixes[-1] == ".gz" else open
    kind = (
        suffixes[-2] if suffixes and suffixes[-1] == ".gz" and len(suffixes) > 1 else (suffixes or [""])[-1]
    )
    with opener(path, "rt", encoding="utf-8") as f:
        if kind in (".json", ".jsonl"):
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield json.loads(line)[json_key]
                except (ValueError, KeyError) as err:
                    raise ValueError(
                        f"{path}:{lineno}: not a JSON object with a {json_key!r} field ({err})"
                    ) from None
        elif kind == ".txt":
            block: list[str] = []
            for line in f:
                if line.strip():
                    block.append(line.rstrip("\n"))
                elif block:
                    yield "\n".join(block)
                    block = []
            if block:
                yield "\n".join(block)
        else:
            raise ValueError(f"{path}: expected .json, .jsonl or .txt (optionally .gz)")


def _batched(items: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


_WORKER_TOKENIZER: HFTokenizer | None = None


def _init_worker(folder: str, eod_token: str | None) -> None:
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = HFTokenizer(Path(folder), eod_token)


def _encode(texts: list[str]) -> list[list[int]]:
    return _WORKER_TOKENIZER.encode_batch(texts)


def write_indexed_dataset(
    documents: Iterable[list[int]] | Iterable[np.ndarray], output_prefix: Path, vocab_size: int
) -> dict:
    """Write token-id documents as PREFIX.bin/.idx (one sequence per document), atomically.
    Returns {"documents": n, "tokens": n}."""
    with quiet_megatron():
        from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    output_prefix = Path(output_prefix)
    output_prefix.parent.mkdir(parents=True, exist_ok=True)
    tmp = output_prefix.with_name(output_prefix.name + ".tmp")
    builder = IndexedDatasetBuilder(f"{tmp}.bin", dtype=DType.optimal_dtype(vocab_size))
    n_docs = n_tokens = 0
    try:
        for ids in documents:
            ids = np.asarray(ids)
            if ids.size == 0:
                continue
            builder.add_document(ids, [ids.size])
            n_docs += 1
            n_tokens += ids.size
        builder.finalize(f"{tmp}.idx")
        if n_docs == 0:
            raise ValueError(f"{output_prefix}: no non-empty documents to write")
        os.replace(f"{tmp}.bin", f"{output_prefix}.bin")
        os.replace(f"{tmp}.idx", f"{output_prefix}.idx")
    finally:  # a failed write (a full disk) leaves no half-written .tmp files
        builder.data_file.close()
        for ext in (".bin", ".idx"):
            Path(f"{tmp}{ext}").unlink(missing_ok=True)
    return {"documents": n_docs, "tokens": n_tokens}


def tokenize_documents(
    texts: Iterable[str], tokenizer: HFTokenizer, workers: int = 1, batch_size: int = 256
) -> Iterator[list[int]]:
    """Token ids of each document followed by the EOD token, in input order."""
    if workers <= 1:
        batches = map(tokenizer.encode_batch, _batched(texts, batch_size))
        for batch in batches:
            yield from (ids + [tokenizer.eod] for ids in batch)
        return
    with ProcessPoolExecutor(
        workers, initializer=_init_worker, initargs=(str(tokenizer.path), tokenizer.eod_token)
    ) as pool:
        for batch in pool.map(_encode, _batched(texts, batch_size), chunksize=4):
            yield from (ids + [tokenizer.eod] for ids in batch)


def preprocess(
    inputs: list[Path],
    tokenizer_folder: Path,
    output_prefix: Path,
    json_key: str = "text",
    workers: int = 1,
    eod_token: str | None = None,
) -> dict:
    tokenizer = HFTokenizer(tokenizer_folder, eod_token)
    texts = (doc for path in inputs for doc in read_documents(path, json_key))
    stats = write_indexed_dataset(
        tokenize_documents(texts, tokenizer, workers), output_prefix, tokenizer.vocab_size
    )
    return {**stats, "vocab_size": tokenizer.vocab_size, "eod": tokenizer.eod}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m input_preprocessing.llama31_8b.preprocess",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--input", type=Path, nargs="+", required=True)
    parser.add_argument("--tokenizer", type=Path, required=True, help="Hugging Face tokenizer folder")
    parser.add_argument("--output-prefix", type=Path, required=True)
    parser.add_argument("--json-key", default="text")
    parser.add_argument("--eod-token", default=None, help="default: the folder's eos_token")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    args = parser.parse_args(argv)
    try:
        stats = preprocess(
            args.input, args.tokenizer, args.output_prefix, args.json_key, args.workers, args.eod_token
        )
    except (OSError, ValueError) as err:
        print(f"preprocess: error: {err}", file=sys.stderr)
        return 2
    print(
        f"preprocess: {args.output_prefix}.bin/.idx: {stats['documents']} documents, "
        f"{stats['tokens']} tokens "
        f"(vocabulary {stats['vocab_size']}, EOD id {stats['eod']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
