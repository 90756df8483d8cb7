"""BERT's run as the trainer builds it (`training.bert.build.build_run`: its step, 2 accumulated micro-batches
of packed rows, LAMB) on a tiny seeded run, against the golden file (`tests/golden.py`). The state dict's
names are the model's own, so a renamed parameter shows here too."""

from __future__ import annotations

import numpy as np
import torch

from tests.bert.synthetic import TINY, make_sequence
from tests.golden import check_golden, digest
from training.bert import build, data
from training.bert.model import BertShape
from training.common.dist import DistInfo

# the state-dict names of the code that wrote the golden file -> today's (the FFN became its own module)
RENAMED = {".ffn_in.": ".ffn.up.", ".ffn_out.": ".ffn.down."}


def packed_rows(rng: np.random.Generator, count: int) -> list[tuple]:
    rows = []
    for _ in range(count):
        lens = [int(x) for x in rng.integers(20, 120, int(rng.integers(1, 4)))]
        seqs = [make_sequence(rng, n) for n in lens]
        offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
        row = {
            "input_ids": np.concatenate([s[0] for s in seqs]),
            "segment_ids": np.concatenate([s[1] for s in seqs]),
            "masked_lm_positions": np.concatenate([s[2] + o for s, o in zip(seqs, offsets)]),
            "masked_lm_ids": np.concatenate([s[3] for s in seqs]),
            "packed_input_len": np.array(lens),
            "packed_masked_lm_len": np.array([len(s[2]) for s in seqs]),
            "next_sentence_labels": np.array([s[4] for s in seqs]),
        }
        rows.append(tuple(row[k] for k in data.TRAIN_KEYS))
    return rows


class OldNames(torch.nn.Module):
    """The model's state dict under the names it had when the golden file was written."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def state_dict(self, *args, **kwargs):
        out = {}
        for name, tensor in self.model.state_dict().items():
            for new, old in ((v, k) for k, v in RENAMED.items()):
                name = name.replace(new, old)
            out[name] = tensor
        return out


def test_bert_train_step_matches_the_golden_file():
    threads = torch.get_num_threads()  # reductions split over threads round differently: one, as recorded
    torch.set_num_threads(1)
    try:
        run()
    finally:
        torch.set_num_threads(threads)


def run():
    torch.manual_seed(0)
    config = {k: v for k, v in TINY.items() if k != "hidden_act"}
    shape = BertShape(**config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    steps, accum, rows = 5, 2, 4
    spec = build.RunSpec(shape, attention="sdpa", precision="fp32", gradient_steps=accum)
    cpu = DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
    model, step, _ = build.build_run(spec, cpu)
    packed = packed_rows(np.random.default_rng(3), steps * accum * rows)
    batches = iter([data.collate(packed[i * rows : (i + 1) * rows], 512) for i in range(steps * accum)])
    losses = [step(batches).item() for _ in range(steps)]
    check_golden("bert", "accum2", {"losses": losses, "weights": digest(OldNames(model))})
