"""The plots name what each benchmark's `eval_accuracy` is: masked-LM accuracy (BERT), log perplexity
(Llama 3.1 8B), eval loss (Llama 2 70B LoRA). The convergence check's plot and the scorer's."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure

from training import convergence
from training.benchmarks import BENCHMARKS
from training.scoring import report

WORDS = {
    "bert": "masked-LM accuracy",
    "llama31_8b": "log perplexity",
    "llama2_70b_lora": "eval loss",
    "flux1": "validation loss",
}


@pytest.fixture
def drawn(monkeypatch) -> list[Figure]:
    """The figures the plots save (nothing written)."""
    figures: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *args, **kwargs: figures.append(self))
    return figures


def test_every_benchmark_has_its_words():
    assert set(WORDS) == set(BENCHMARKS)


@pytest.mark.parametrize("benchmark", sorted(WORDS))
def test_the_convergence_plot_names_the_metric(drawn, benchmark):
    runs = [
        convergence.Outcome(mode, 1, Path(f"{mode}.log"), True, 64.0, 1.0, [(32.0, 3.1), (64.0, 2.9)])
        for mode in ("reference", "mode")
    ]
    convergence.plot(runs, 2.95, Path("convergence.png"), benchmark)
    (figure,) = drawn
    assert figure.axes[0].get_ylabel() == f"{WORDS[benchmark]} (eval_accuracy)"


@pytest.mark.parametrize("benchmark", sorted(WORDS))
def test_the_scorer_s_plot_names_the_metric(drawn, benchmark):
    official = BENCHMARKS[benchmark].target
    summary = {
        "benchmark": benchmark,
        "samples_key": "samples_count",
        "official_target": official,
        "runs": [
            {"log": "run_1.log", "evals": [[8, official + 1], [16, official]], "target_accuracy": official}
        ],
    }
    report.plot_eval_accuracy(summary, Path("eval_accuracy.png"))
    (figure,) = drawn
    axes = figure.axes[0]
    assert axes.get_ylabel() == f"{WORDS[benchmark]} (eval_accuracy)"
    assert axes.get_title().startswith(f"{benchmark}: {WORDS[benchmark]} per run")
