"""The token rows the Llama benches train on: the bundled Wikipedia excerpt (`text`), in order, as training
reads its data. Not random ids where losses are compared: the speed is the same, and a model memorises a few
random rows in a few steps, to a loss near zero where per-step relative parity measures nothing (0.02 against
0.03 is "50% off"). BERT's rows are `bert_rows`'.
"""

from __future__ import annotations

import torch

from perf.lib import text


def excerpt(count: int, length: int, offset: int = 0, vocab: int | None = None) -> torch.Tensor:
    """`count` consecutive rows of `length` ids of the excerpt from id `offset` (wrapping around), (count,
    length) int64 on the CPU; taken modulo `vocab` when given (a toy model's smaller table)."""
    ids = torch.from_numpy(text.rows(text.wiki_ids(), count, length, offset))
    return ids % vocab if vocab is not None else ids


def llama_batches(count: int, mbs: int, seq: int, vocab: int, device, rank: int = 0) -> list[torch.Tensor]:
    """A rank's `count` micro-batches of `mbs` rows of `seq` + 1 ids, (mbs, seq + 1) each, trained in order
    (then again); each rank reads its own rows."""
    per_rank = count * mbs
    rows = excerpt(per_rank, seq + 1, rank * per_rank * (seq + 1), vocab).to(device)
    return list(rows.view(count, mbs, seq + 1))


class LoraRows:
    """The rows of the LoRA bench, one a step (micro-batch 1), as GovReport's: the first third of each row is
    the prompt, not scored. `source`: `stream` the excerpt's rows in order, a new one each step and each rank;
    `row` one excerpt row every step; `random` one row of random ids every step (memorised within a few
    steps: a speed figure only). Every variant starts from the first row. The first `ahead` rows are made
    before any step, on the device: no timed step waits for the host."""

    def __init__(self, vocab: int, seq: int, device, rank: int, world: int, source: str, ahead: int):
        self.vocab, self.seq, self.device, self.rank, self.world = vocab, seq, device, rank, world
        self.source = source
        self.made = [self._make(i) for i in range(ahead if source == "stream" else 1)]

    def __call__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.source != "stream":
            return self.made[0]
        return self.made[step] if step < len(self.made) else self._make(step)

    def _make(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        seq = self.seq
        if self.source == "random":
            g = torch.Generator(device=self.device).manual_seed(1 + self.rank)
            tokens = torch.randint(0, self.vocab, (1, seq), device=self.device, generator=g)
            labels = torch.roll(tokens, -1, 1)
            labels[:, -1] = -100
        else:
            row = excerpt(1, seq + 1, (step * self.world + self.rank) * (seq + 1), self.vocab)[0]
            row = row.to(self.device)
            tokens, labels = row[None, :-1].clone(), row[None, 1:].clone()
        labels[:, : seq // 3] = -100  # the prompt is not scored
        return tokens, labels
