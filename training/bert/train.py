"""BERT-Large phase-2 pretraining, MLPerf Training rules: `torchrun -m training.bert.train`.

Setup (untimed, between init_start and init_stop), then the timed run: train on packed rows, evaluate
masked-LM accuracy at the scheduled sample counts, stop at the target (`success`) or, as NVIDIA's loop, after
MAX_STEPS (or MAX_SAMPLES_TERMINATION samples, if sooner: `aborted`). A NaN/inf loss also ends the run
`aborted`. The log counts the sequences of the packed rows trained on, as NVIDIA's does. How the run ended
(converged, not converged, diverged, or what it raised) goes to LOGDIR/<RUN_TAG>.outcome.json
(training.common.outcome).
"""

from __future__ import annotations

import functools
import sys

from training.bert import data
from training.bert.build import build_run, disclosure
from training.bert.config import BENCHMARK, OFFICIAL_TARGET, BertConfig
from training.bert.optim import poly_warmup_lr
from training.bert.step import evaluate, loss_scaler, warm_up
from training.common import dist, outcome
from training.common.config import config_from_environment
from training.common.mllog import MLLogger, constants
from training.common.mlperf_loop import MLPerfRun, StepResult


def main() -> outcome.Outcome:
    cfg = config_from_environment(BertConfig, __doc__)
    info = dist.init_distributed()
    seed = dist.run_seed(cfg.seed, info.device)
    run = MLPerfRun(BENCHMARK, cfg, info, seed, "bert")
    dist.seed_everything(seed + info.rank)
    gbs = cfg.global_batch_size(info.world_size)
    log_hyperparameters(run.mllog, cfg, gbs)

    paths = cfg.paths()
    model, step, chosen = build_run(cfg.run_spec(cfg.model_shape()), info)
    run.log_backends(chosen)
    run.log_disclosure(disclosure(chosen["precision"], step.fp8, cfg.batch_size))
    run.mllog.event(constants.WEIGHTS_INITIALIZATION, str(paths["init_checkpoint"] or "random"))
    run.write_config({"world_size": info.world_size, "global_batch_size": gbs, "backends": chosen})
    warm_up(step, cfg, loss_scaler(chosen["precision"], cfg.init_loss_scale, info.device))

    @functools.cache
    def eval_set() -> list[data.Batch]:
        """This rank's eval batches: read at the first evaluation and kept on the device."""
        batches = data.eval_batches(
            paths["eval_dir"],
            cfg.num_eval_examples,
            info.rank,
            info.world_size,
            cfg.eval_batch_size,
            cfg.max_seq_length,
        )
        return [b.to(info.device) for b in batches]

    def start_training():
        shards = data.list_shards(paths["train_dir"])
        batches = data.Prefetcher(
            data.train_batches(
                shards,
                info.rank,
                info.world_size,
                cfg.batch_size,
                cfg.max_seq_length,
                seed,
                static=cfg.compile,
            ),
            info.device,
        )

        def one_step(index: int) -> StepResult:
            lr = poly_warmup_lr(index, cfg.lr, cfg.max_steps, cfg.num_warmup_steps(), cfg.warmup_start())
            micro = [next(batches) for _ in range(cfg.gradient_steps)]
            return StepResult(step(iter(micro), lr), lr, samples=sum(b.num_sequences for b in micro))

        return one_step

    return run.train(
        cfg.schedule(info.world_size),
        start_training,
        lambda: evaluate(model, eval_set(), step.autocast, info.device),
        cfg.target_accuracy,
        metric="eval_accuracy",
        eval_samples=data.count_eval_examples(paths["eval_dir"], cfg.num_eval_examples),
    )


def log_hyperparameters(mllog: MLLogger, cfg: BertConfig, gbs: int) -> None:
    """Every key the BERT closed rules require, plus the ones NVIDIA logs for the reader, with NVIDIA's
    types (its run_pretraining.py parses max_steps as a float: 3680.0)."""
    mllog.hyperparameters(
        {
            constants.GLOBAL_BATCH_SIZE: gbs,
            "d_batch_size": cfg.batch_size,
            constants.GRADIENT_ACCUMULATION_STEPS: cfg.gradient_steps,
            "max_predictions_per_seq": cfg.max_predictions_per_seq,
            constants.MAX_SEQUENCE_LENGTH: cfg.max_seq_length,
            constants.OPT_LR_TRAINING_STEPS: float(cfg.max_steps),
            constants.NUM_WARMUP_STEPS: cfg.num_warmup_steps(),
            constants.OPT_BASE_LR: cfg.lr,
            constants.OPT_LAMB_EPSILON: cfg.lamb_epsilon,
            "opt_epsilon": cfg.lamb_epsilon,
            constants.OPT_LR_WARMUP_STEPS: cfg.num_warmup_steps(),
            constants.START_WARMUP_STEP: cfg.warmup_start(),
            constants.OPT_LAMB_BETA_1: cfg.beta1,
            constants.OPT_LAMB_BETA_2: cfg.beta2,
            constants.OPT_LAMB_WEIGHT_DECAY: cfg.weight_decay,
            "opt_lamb_learning_rate_decay_poly_power": 1.0,
            "target_accuracy": cfg.target_accuracy,
        }
    )
    if cfg.target_accuracy != OFFICIAL_TARGET:
        print(
            f"bert: TARGET_MLM_ACCURACY={cfg.target_accuracy} is not MLPerf's {OFFICIAL_TARGET}: "
            "this run is NOT a valid MLPerf result",
            file=sys.stderr,
        )


if __name__ == "__main__":
    outcome.run(main, "bert")
