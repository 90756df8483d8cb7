"""The LoRA learning-rate schedule with AMD's and NVIDIA's WARMUP_RATIO and MIN_LR (their NeMo yaml's
CosineAnnealing: warm-up (step + 1) / (warmup + 1) for int(ratio x MAX_STEPS) steps, then a half cosine from
LR to MIN_LR), what it logs, and NVIDIA's TP/PP/CP in the batch arithmetic."""

from __future__ import annotations

import math

import pytest

from training.common.config import ConfigError
from training.llama.parallel import Parallelism
from training.llama2_70b_lora import train
from training.llama2_70b_lora.config import LoraConfig

BASE = {"DATADIR": "/data", "MINIBS": "1", "LR": "4e-4", "MAX_STEPS": "1024", "DGXNGPU": "8"}


def lora(**env: str) -> LoraConfig:
    return LoraConfig.from_env({**BASE, **env})


def test_the_default_is_cosine_to_zero_without_warm_up():
    cfg = lora()
    assert cfg.warmup_steps() == 0 and cfg.lr_schedule() == "cosine to 0, no warm-up"
    assert [cfg.learning_rate(s) for s in (0, 512, 1024, 1100)] == pytest.approx([4e-4, 2e-4, 0.0, 0.0])


def test_warmup_ratio_and_min_lr_give_nemos_cosine_annealing():
    cfg = lora(WARMUP_RATIO="0.1", MIN_LR="2e-5")
    assert cfg.warmup_steps() == 102  # int(0.1 x 1024), as NeMo truncates
    lr = [cfg.learning_rate(s) for s in (0, 50, 102, 103, 563, 1024, 2000)]
    cosine = 2e-5 + (4e-4 - 2e-5) * 0.5 * (1 + math.cos(math.pi * (563 - 102) / (1024 - 102)))
    want = [
        4e-4 / 103,
        4e-4 * 51 / 103,
        4e-4,
        2e-5 + (4e-4 - 2e-5) * 0.5 * (1 + math.cos(math.pi / 922)),
        cosine,
        2e-5,
        2e-5,
    ]
    assert lr == pytest.approx(want, rel=1e-12)
    assert cfg.lr_schedule() == "cosine to 2e-05, linear warm-up of 102 steps"


def test_min_lr_above_lr_is_refused_as_nemo_refuses_it():
    with pytest.raises(ConfigError, match="MIN_LR=0.001 is above LR=0.0004"):
        lora(MIN_LR="1e-3")
    with pytest.raises(ConfigError, match="WARMUP_RATIO=1.0 must be in"):
        lora(WARMUP_RATIO="1")


class Recorder:
    def __init__(self):
        self.logged = {}

    def hyperparameters(self, values: dict) -> None:
        self.logged.update(values)


def test_the_warm_up_is_logged_as_amd_and_nvidia_log_it():
    """opt_learning_rate_warmup_factor is the warm-up ratio in AMD's and NVIDIA's LoRA logs (their callbacks
    log cfg.model.optim.sched.warmup_ratio under that key)."""
    for env, factor in (({}, 0.0), ({"WARMUP_RATIO": "0.05"}, 0.05)):
        cfg, log = lora(**env), Recorder()
        train.log_hyperparameters(log, cfg, Parallelism(8, 1, 1, 1, 8, 1), 8, 3901, 173, True)
        assert log.logged["opt_learning_rate_warmup_factor"] == factor
        assert log.logged["opt_learning_rate_decay_schedule"] == cfg.lr_schedule()


def test_nvidias_tp_pp_cp_count_in_the_global_batch_and_the_layout_is_fsdp():
    """NVIDIA's MINIBS is per data-parallel rank: GBS = MINIBS x GPUs / (TP x PP x CP). LoRA here is FSDP2
    over every GPU: each takes GBS / GPUs whole sequences where that is a whole number, and where the batch is
    smaller than the world each sequence is split over the fewest GPUs that give all a share (context
    parallelism), the data-parallel size NVIDIA's. Both said as substitutions."""
    cfg = lora(MINIBS="4", TP="4")  # NVIDIA v4.0's 1 x 8 H100: GBS 8
    assert cfg.global_batch_size(8) == 8
    assert cfg.parallelism(8) == Parallelism(8, 1, 1, 1, 8, 1)
    assert cfg.scale_problems(8) == []
    (said,) = cfg.substitutions(8)
    assert "TP=4 PP=1 CP=1" in said and "1 whole sequence(s) per GPU" in said
    big = lora(MINIBS="1", TP="4", CP="2", DGXNNODES="8")  # NVIDIA's 8 x 8 H100: GBS 8 over 64 GPUs
    assert big.global_batch_size(64) == 8 and big.scale_problems(64) == []
    assert big.parallelism(64) == Parallelism(64, 1, 1, 8, 8, 1)
    (said,) = big.substitutions(64)
    assert "each sequence over 8 GPUs (context parallelism)" in said
    two = lora(MINIBS="2", CP="2", DGXNNODES="16", DGXNGPU="4")  # GBS 64 on 64: whole sequences, no split
    assert two.parallelism(64) == Parallelism(64, 1, 1, 1, 64, 1)
    assert lora().substitutions(8) == []


def test_a_split_sequence_refuses_what_context_parallelism_cannot_run():
    """The layout's own limits, named: compiled blocks and a sequence length the split does not divide."""
    for env, needle in (
        ({"COMPILE": "1"}, "CONTEXT_PARALLEL_SIZE>1 with COMPILE=1"),
        ({"MAX_SEQLEN": "8200"}, "SEQ_LENGTH=8200 is not a multiple of 2 x CONTEXT_PARALLEL"),
    ):
        cfg = lora(MINIBS="1", CP="8", DGXNNODES="2", DGXNGPU="4", **env)
        (problem,) = cfg.scale_problems(8)
        assert "8 GPUs for GBS 1 split each sequence over 8 of them" in problem and needle in problem
