"""C4 (or any Megatron indexed dataset) -> training micro-batches and the validation set.

Training: megatron-core's `GPTDataset` over the training prefix, built through its
`BlendedMegatronDatasetBuilder` as NeMo's `PreTrainingDataModule` does: documents shuffled by the run's seed,
concatenated and cut into `seq_length + 1`-token samples, the samples shuffled again. Its index files
(document / sample / shuffle index, .npy) go to a writable cache folder and are built before `init_start`,
rank 0 first (AMD's `prepare_data.py` step, folded into the trainer). Optimizer step s uses samples
[s x GBS, (s + 1) x GBS); micro-batch m of data-parallel rank d takes MBS of them at
s x GBS + (m x DP + d) x MBS, so every tensor-parallel rank of a group reads the same samples.

Validation: the first EVAL_SAMPLES sequences of the validation prefix, unshuffled (MLPerf: "the first 1024
sequences"): documents in file order, concatenated, windows of `seq_length + 1` tokens overlapping by one,
exactly the samples a GPTDataset with identity document and shuffle indices would give. Read once, at the
first evaluation, and kept in memory.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from training.common.indexed import DataError, check_prefix, open_indexed, quiet_megatron


class _TokenIds:
    """What GPTDatasetConfig needs of a tokenizer for pre-tokenized data: the vocabulary size (for the cache
    key). EOD is only read when position ids or attention masks are reset at document ends, which MLPerf's
    8B recipe does not do."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.eod = None
        self.unique_identifiers = {"class": "pre-tokenized", "vocab_size": vocab_size}


@contextlib.contextmanager
def _locked(cache_dir: Path):
    """The index cache held by rank 0 (megatron-core's builder: it builds, the other ranks wait at a barrier,
    then read) while it builds or reads it: megatron-core writes its files in place, and two jobs on one node
    (two launchers, two tests) with the same data and seed build the same files. Where the file system
    refuses locks, nothing is held."""
    if torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
        yield
        return
    with open(cache_dir / ".lock", "w") as lock:
        with contextlib.suppress(OSError):
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_train_dataset(
    prefix: Path, seq_length: int, num_samples: int, seed: int, cache_dir: Path, vocab_size: int
):
    """megatron-core GPTDataset with at least `num_samples` samples; call on every rank (rank 0 builds the
    index cache, the others wait and load it)."""
    check_prefix(prefix)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"INDEX_CACHE_DIR {cache_dir} is not writable ({err})") from None
    with _locked(cache_dir), quiet_megatron():
        from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

        config = GPTDatasetConfig(
            random_seed=seed,
            sequence_length=seq_length,
            blend_per_split=[([str(prefix)], None), None, None],
            path_to_cache=str(cache_dir),
            mmap_bin_files=True,
            tokenizer=_TokenIds(vocab_size),
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            create_attention_mask=False,
        )
        train, _, _ = BlendedMegatronDatasetBuilder(
            GPTDataset, [num_samples, None, None], lambda: True, config
        ).build()
    if train is None or len(train) < num_samples:
        raise DataError(f"{prefix}: could not build {num_samples} training samples of {seq_length} tokens")
    return train


class StepSampler(torch.utils.data.Sampler):
    """Index lists of this data-parallel rank's micro-batches, step after step, from `start_step`."""

    def __init__(
        self, gbs: int, mbs: int, dp: int, dp_rank: int, grad_accum: int, num_steps: int, start_step: int = 0
    ):
        self.gbs, self.mbs, self.dp, self.dp_rank = gbs, mbs, dp, dp_rank
        self.grad_accum, self.num_steps, self.start_step = grad_accum, num_steps, start_step

    def __iter__(self) -> Iterator[list[int]]:
        for step in range(self.start_step, self.num_steps):
            for micro in range(self.grad_accum):
                first = step * self.gbs + (micro * self.dp + self.dp_rank) * self.mbs
                yield list(range(first, first + self.mbs))

    def __len__(self) -> int:
        return (self.num_steps - self.start_step) * self.grad_accum


def _collate(samples: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.stack([s["tokens"] for s in samples]), torch.stack([s["labels"] for s in samples])


def train_batches(dataset, sampler: StepSampler, num_workers: int, pin_memory: bool):
    """Iterator of (tokens, labels) micro-batches, (MBS, seq_length) int64 each."""
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=num_workers,
        collate_fn=_collate,
        pin_memory=pin_memory,
        prefetch_factor=4 if num_workers else None,
    )
    return iter(loader)


def load_validation(prefix: Path, num_samples: int, seq_length: int, vocab_size: int) -> torch.Tensor:
    """The first `num_samples` validation sequences, (num_samples, seq_length + 1) int32."""
    dataset = open_indexed(prefix)
    need = num_samples * seq_length + 1
    ends = np.cumsum(dataset.sequence_lengths, dtype=np.int64)
    if ends[-1] < need:
        raise DataError(
            f"{prefix}: {ends[-1]} tokens, fewer than the {need} that {num_samples} validation "
            f"sequences of {seq_length} tokens need"
        )
    last = int(np.searchsorted(ends, need))
    tokens = np.concatenate([dataset[i] for i in range(last + 1)])[:need].astype(np.int64)
    if tokens.min() < 0 or tokens.max() >= vocab_size:
        raise DataError(
            f"{prefix}: token ids up to {tokens.max()} do not fit the model's vocabulary of {vocab_size}"
        )
    tokens = torch.from_numpy(tokens)
    return tokens.unfold(0, seq_length + 1, seq_length).to(torch.int32).contiguous()


def validation_token_count(prefix: Path) -> int:
    # keep the dataset alive: its arrays are views of the .idx mmap it closes on deletion
    dataset = open_indexed(prefix)
    return int(np.sum(dataset.sequence_lengths, dtype=np.int64))
