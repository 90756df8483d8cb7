"""The learning-rate schedule: NeMo's linear warm-up, then cosine to 10% of the peak over 1.2M - warm-up."""

import math

import pytest

from training.llama.optim import cosine_with_warmup

PEAK, END, WARMUP, MAX = 8e-4, 8e-5, 128, 1_200_000


def lr(step):
    return cosine_with_warmup(step, PEAK, WARMUP, MAX, END)


def test_warmup_is_linear_and_reaches_the_peak():
    assert lr(0) == pytest.approx(PEAK / 129)
    assert lr(63) == pytest.approx(PEAK * 64 / 129)
    assert lr(WARMUP) == pytest.approx(PEAK)


def test_cosine_decay_to_ten_percent():
    half = WARMUP + (MAX - WARMUP) // 2
    assert lr(half) == pytest.approx((PEAK + END) / 2, rel=1e-6)
    assert lr(MAX) == pytest.approx(END)
    assert lr(MAX + 1) == END
    t = 1000
    assert lr(WARMUP + t) == pytest.approx(
        END + (PEAK - END) * 0.5 * (1 + math.cos(math.pi * t / (MAX - WARMUP)))
    )
    # over a whole run (~6,000 steps) the rate stays within 0.01% of the peak: the horizon is 1.2M steps
    assert lr(6000) > 0.9999 * PEAK


def test_no_warmup():
    assert cosine_with_warmup(0, PEAK, 0, MAX, END) == pytest.approx(PEAK)
