"""The benches' learning rates: NeMo's cosine with a linear warm-up (`training.llama.optim`), to a tenth of
the peak over 50 steps, the schedule of `curve_parity`'s curves. A bench on the same rows at the same rates
repeats the first steps of its curve.

From random weights, a constant MLPerf rate throws a model into one early spike where two runs of the same
code part by several percent (the 20-block LoRA at 4e-4: 12 -> 16.4 at step 5; the 4-block 8B at 3e-4: 11.4 ->
14-20), so per-step loss parity measures nothing there: a warm-up and, for the 8B, a lower peak avoid it.
"""

from __future__ import annotations

from training.llama.optim import cosine_with_warmup

LLAMA_LR = 3e-5  # Llama 3.1 8B's peak here
LORA_LR = 4e-4  # Llama 2 70B LoRA's, MLPerf's
STEPS = 50  # the cosine's horizon


def lr_at(step: int, peak: float, steps: int = STEPS, warmup: int = 5) -> float:
    """The learning rate of step `step` (from 0): `warmup` steps up to `peak`, then a cosine down to a tenth
    of it at step `steps`."""
    return cosine_with_warmup(step, peak, warmup, steps, peak / 10)


def lora_lr(step: int, warmup: int) -> float:
    """`bench_lora`'s rate: `curve_parity lora --lora-warmup` `warmup`'s schedule; `warmup` 0: MLPerf's
    constant 4e-4 (its recipe has no warm-up)."""
    return lr_at(step, LORA_LR, warmup=warmup) if warmup > 0 else LORA_LR


def llama_lr(step: int, warmup: int = 10) -> float:
    """`bench_llama`'s and `bench_throughput`'s rate: `curve_parity llama`'s schedule (3e-5 after `warmup`
    steps). With 10 warm-up steps the full-depth 8B on 4 x H200 still spikes from step 7:
    `bench_throughput --lr-warmup` sets more."""
    return lr_at(step, LLAMA_LR, warmup=warmup)
