"""Why the throughput suite's losses fall on random tokens: memorisation of its pool of two sequences, not
a look-ahead (CPU, a minute). The suite's AdamW (lr 1e-3, clip 1.0) trains a 2-block Llama with the 128,256
token vocabulary on two random 256-token sequences, at three widths, then scores a fresh random sequence. A
model that saw the next token would score the fresh one low too; memorisation leaves it at ln(vocabulary),
11.76.

    python -m perf.memorisation
"""

from __future__ import annotations

import torch

from training.llama.model import Llama, LlamaShape, cross_entropy
from training.throughput.llm import BETAS, CLIP_NORM, EPS, LR, WEIGHT_DECAY

VOCAB, SEQ, STEPS = 128256, 256, 3


def main() -> None:
    torch.set_num_threads(2)
    print("| width | loss at steps 1-3 (the pool of two) | loss of a fresh random sequence |")
    print("|---|---|---|")
    for hidden in (128, 512, 1024):
        torch.manual_seed(0)
        heads = dict(num_heads=hidden // 64, num_kv_heads=max(1, hidden // 128))
        shape = LlamaShape(num_layers=2, hidden_size=hidden, ffn_hidden_size=2 * hidden, **heads,
                           vocab_size=VOCAB, max_seq_length=SEQ, rope_scaling=None)  # fmt: skip
        model = Llama(shape)
        model.init_weights()
        opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
        g = torch.Generator().manual_seed(1)
        pool = [torch.randint(0, VOCAB, (1, SEQ + 1), generator=g) for _ in range(2)]
        losses = []
        for _ in range(STEPS):
            total = 0.0
            for rows in pool:
                loss = cross_entropy(model(rows[:, :-1]), rows[:, 1:]) / len(pool)
                loss.backward()
                total += loss.item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
            opt.step()
            opt.zero_grad()
            losses.append(total)
        with torch.no_grad():
            fresh = torch.randint(0, VOCAB, (1, SEQ + 1), generator=g)
            fresh_loss = cross_entropy(model(fresh[:, :-1]), fresh[:, 1:]).item()
        print(f"| {hidden} | {', '.join(f'{x:.2f}' for x in losses)} | {fresh_loss:.2f} |", flush=True)


if __name__ == "__main__":
    main()
