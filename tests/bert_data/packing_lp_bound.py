"""How close does the packing plan come to the best possible? (A development measurement, not a test.)

    python -m tests.bert_data.packing_lp_bound        # needs scipy (for the linear program)

Sequences come from our own example generator run on synthetic documents whose token counts follow a
log-normal law (Wikipedia-like: many short articles, a long tail), at three median sizes. For each length
mix it prints the rows our plan needs, the rows a plain best-fit-decreasing plan needs (one partner at a
time), and a lower bound from a linear program over all row shapes of at most 3 sequences, with lengths
rounded down to multiples of 4 (so the bound is optimistic: no packing can use fewer rows).
"""

import itertools

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import lil_matrix

from input_preprocessing.bert.packing import pack_histogram
from input_preprocessing.bert.pretraining import PretrainingParams, create_instances
from input_preprocessing.bert.tokenization import load_vocab
from tests.bert_data.helpers import VOCAB


def lp_rows(hist: np.ndarray, width: int = 4) -> float:
    counts = np.zeros(512 // width + 1)
    for length in range(1, 513):
        counts[length // width] += hist[length]
    bins = [b for b in range(len(counts)) if counts[b]]
    shapes = [
        c
        for k in (1, 2, 3)
        for c in itertools.combinations_with_replacement(bins, k)
        if sum(b * width for b in c) <= 512
    ]
    a = lil_matrix((len(bins), len(shapes)))
    row = {b: i for i, b in enumerate(bins)}
    for j, shape in enumerate(shapes):
        for b in shape:
            a[row[b], j] += 1
    result = linprog(
        np.ones(len(shapes)), A_eq=a.tocsr(), b_eq=counts[bins], bounds=(0, None), method="highs"
    )
    return float(result.fun)


def best_fit_decreasing_rows(hist: np.ndarray) -> int:
    """Rows of plain best-fit-decreasing: each row takes the longest partner that fits, one at a time."""
    h = hist.astype(np.int64).copy()
    rows = 0
    for length in range(512, 0, -1):
        while h[length]:
            h[length] -= 1
            rows += 1
            space, slots = 512 - length, 2
            while slots:
                fits = np.nonzero(h[1 : min(space, 512) + 1])[0]
                if not len(fits):
                    break
                partner = int(fits[-1]) + 1
                h[partner] -= 1
                space, slots = space - partner, slots - 1
    return rows


def synthetic_hist(median_tokens: int, documents: int, rng: np.random.Generator) -> np.ndarray:
    docs = []
    for n in rng.lognormal(np.log(median_tokens), 1.1, size=documents):
        n, sentences = max(5, int(n)), []
        while n > 0:
            k = min(n, max(3, int(rng.gamma(2.0, 13))))
            sentences.append([1000 + j % 500 for j in range(k)])
            n -= k
        docs.append(sentences)
    seqs = create_instances(docs, load_vocab(VOCAB), PretrainingParams(dupe_factor=1))
    return np.bincount(seqs.seq_len, minlength=513)


def main() -> None:
    rng = np.random.default_rng(0)
    print("median tokens/article  sequences  ours (seq/row)  best-fit-decr.  LP bound (seq/row)")
    for median in (150, 300, 600):
        hist = synthetic_hist(median, 4000, rng)
        n = int(hist.sum())
        ours = sum(pack_histogram(hist).values())
        bfd = best_fit_decreasing_rows(hist)
        bound = lp_rows(hist)
        ratios = f"{ours:>6} ({n / ours:.3f})  {bfd:>6} ({n / bfd:.3f})  {bound:>8.0f} ({n / bound:.3f})"
        print(f"{median:>21}  {n:>9}  {ratios}")


if __name__ == "__main__":
    main()
