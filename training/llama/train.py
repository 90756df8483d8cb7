"""Llama 3.1 8B pretraining on C4, MLPerf Training rules: `torchrun -m training.llama.train`.

Setup: the training-sample index cache is built before `init_start` (untimed, as AMD's prepare_data.py);
the model is built, parallelized and initialized between init_start and init_stop. The timed run trains
from random weights, evaluates the validation log-perplexity every EVAL_EVERY samples on the first
EVAL_SAMPLES validation sequences, and stops at TARGET (`success`) or after the sample limit (`aborted`).
A non-finite loss also ends the run `aborted`. Exit status: 0 success, 1 aborted, 2 config or data error.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from contextlib import nullcontext

import torch

from training.common import backends, dist
from training.common.config import ConfigError, write_effective_config
from training.common.fp8 import apply_fp8, reset_fp8_state
from training.common.mllog import MLLogger, constants
from training.llama import data, optim, parallel
from training.llama.config import (
    ADAMW_BETAS,
    ADAMW_EPS,
    BENCHMARK,
    GRAD_CLIP_NORM,
    LR_SCHEDULE,
    WEIGHT_DECAY,
    LlamaPretrainConfig,
    Parallelism,
)
from training.llama.model import Llama, choose_attention, compiled_cross_entropy, cross_entropy


def main() -> int:
    cfg = LlamaPretrainConfig.from_env(os.environ, os.environ.get("CONFIG_VARS", "").split())
    info = dist.init_distributed()
    par = cfg.check(info.world_size)
    seed = dist.broadcast_int(
        cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(2**31), info.device
    )
    shape, paths = cfg.model_shape(), cfg.paths()

    # ---- untimed, before init_start: the shuffled training-sample index (rank 0 builds, others load) ----
    train_set = data.build_train_dataset(
        paths["train"],
        cfg.seq_length,
        cfg.max_train_steps() * cfg.global_batch_size,
        seed,
        paths["cache"],
        shape.vocab_size,
    )

    mllog = MLLogger(info.rank)
    mllog.event(constants.CACHE_CLEAR, cfg.clear_caches)
    mllog.start(constants.INIT_START)
    mllog.submission(BENCHMARK, cfg.org, cfg.platform, cfg.num_nodes)
    mllog.event(constants.SEED, seed)
    log_hyperparameters(mllog, cfg, par)
    dist.seed_everything(seed)  # the same on every rank: weights are initialized shard by shard

    precision = backends.choose_precision(cfg.precision)
    on_gpu = info.device.type == "cuda"
    if par.cp > 1 and not on_gpu:
        raise ConfigError("CONTEXT_PARALLEL_SIZE>1 needs GPUs (ring attention runs on the CUDA/ROCm kernels)")
    mesh = parallel.build_mesh(info.device.type, par.dp, par.tp, par.cp, par.pp)
    with torch.device("meta" if on_gpu else info.device):  # GPU: allocate only this rank's shards
        model = Llama(shape, choose_attention(cfg.attention, info.device))
    if not on_gpu:
        model.init_weights()  # full weights, identical on every rank, then sharded by the apply_* below
    pipeline = parallel.apply_pp(model, mesh)
    fp8_gather = cfg.fp8_param_gather and par.dp * par.cp > 1 and par.tp == 1  # FSDP2 without TP
    fp8 = apply_fp8(model, cfg.fp8, cfg.fp8_backend, cfg.fp8_recipe, fsdp=fp8_gather)
    if fp8.backend == "native" and par.tp == 1:  # each MLP's three FP8 linears run as one function
        fp8.description += ", MLPs fused (fp8.fused_mlp)"
    chosen = {
        "platform": backends.platform_name(),
        "attention": model.layers[0].self_attn.backend,
        "precision": precision,
        "fp8": fp8.description,
        "pipeline_parallel": pipeline,
        "tensor_parallel": parallel.apply_tp(model, mesh),
        "activation_checkpointing": parallel.apply_activation_checkpointing(
            model, cfg.activation_checkpointing
        ),
        "compile": parallel.apply_compile(model, cfg.compile),
        "data_parallel": parallel.apply_fsdp(
            model, mesh, torch.bfloat16 if precision == "bf16" else torch.float32, cfg.reshard_after_forward
        ),
    }
    if on_gpu:
        model.to_empty(device=info.device)
        model.init_weights()
        reset_fp8_state(model)
    fp8.weights_changed(model)  # (the scales of FP8 all-gathers)
    optimizer, impl = optim.build_optimizer(
        model, cfg.max_lr, ADAMW_BETAS, ADAMW_EPS, WEIGHT_DECAY, fused=on_gpu, impl=cfg.adamw_impl
    )
    chosen["optimizer"] = f"AdamW ({impl})"
    schedule = (
        parallel.pipeline_schedule(model, mesh, info.device, par.grad_accum, pipeline_loss)
        if par.pp > 1
        else None
    )
    stages = mesh["pp"].get_group() if par.pp > 1 else None
    for key, value in chosen.items():
        mllog.event(f"backend_{key}", value)
        if info.is_main:
            print(f"llama: {key}: {value}")
    # without FSDP's bf16 parameters, bf16 runs through autocast
    bf16_autocast = precision == "bf16" and chosen["data_parallel"] == "off"
    autocast = torch.autocast(info.device.type, torch.bfloat16) if bf16_autocast else nullcontext()
    if cfg.logdir and cfg.run_tag and info.is_main:
        extra = {
            "seed": seed,
            "parallelism": vars(par),
            "backends": chosen,
            "deviations": cfg.deviations(),
            "model_shape": str(shape),
            "versions": backends.versions(),
            "available": backends.available(),
        }
        write_effective_config(cfg, cfg.logdir / f"{cfg.run_tag}.config.json", extra)
    loss_fn = compiled_cross_entropy if cfg.compile else cross_entropy
    synthetic_warmup(model, cfg, info.device, autocast, fp8, schedule, mesh, par, loss_fn)
    params = [p for group in optimizer.param_groups for p in group["params"]]  # the sharded parameters
    dp_rank = info.rank // (par.pp * par.tp * par.cp)  # the ranks of a PP, TP or CP group read the same data
    first_eval, eval_every = cfg.eval_steps()
    max_steps = cfg.max_train_steps()
    dist.barrier()
    mllog.end(constants.INIT_STOP)

    # ---- timed region: MLPerf's clock starts before any training data is read ----
    mllog.start(constants.RUN_START)
    sampler = data.StepSampler(
        cfg.global_batch_size, cfg.micro_batch_size, par.dp, dp_rank, par.grad_accum, max_steps
    )
    batches = data.train_batches(train_set, sampler, cfg.num_workers, pin_memory=on_gpu)
    mllog.start(constants.BLOCK_START, metadata={"samples_count": 0})
    in_block, validation, next_eval = True, None, first_eval
    status, step, samples = constants.ABORTED, 0, 0
    window_start, window_samples = time.perf_counter(), 0
    finite = torch.ones((), dtype=torch.bool, device=info.device)
    while step < max_steps:
        lr = optim.cosine_with_warmup(step, cfg.max_lr, cfg.warmup_steps, cfg.max_steps, cfg.end_lr())
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss_sum = torch.zeros((), device=info.device)
        if schedule is not None:  # the pipeline runs the step's micro-batches (and FSDP's gradient sync)
            tokens, labels = (
                torch.cat(t).to(info.device) for t in zip(*(next(batches) for _ in range(par.grad_accum)))
            )
            losses = []
            with autocast:
                parallel.pipeline_step(schedule, mesh, tokens, labels, losses)
            if losses:  # the last stage
                loss_sum = torch.stack(losses).mean().detach()
        else:
            for micro in range(par.grad_accum):
                tokens, labels = (t.to(info.device, non_blocking=True) for t in next(batches))
                # FSDP2: reduce-scatter the gradients after the last micro-batch only
                if hasattr(model, "set_requires_gradient_sync"):
                    model.set_requires_gradient_sync(micro == par.grad_accum - 1)
                cp_context, positions = parallel.context_parallel(mesh, tokens, labels)
                with cp_context:  # with CP: this rank's chunks of the sequences, ring attention
                    with autocast, fp8.forward_context():
                        loss = loss_fn(model(tokens, positions), labels)
                    (loss / par.grad_accum).backward()
                loss_sum += loss.detach() / par.grad_accum
        # the step's loss over all its sequences: the mean of every rank's (data-parallel ranks read different
        # sequences, context-parallel ranks different chunks of them, tensor-parallel ranks the same; of a
        # pipeline only the last stage has it)
        loss_sum = dist.all_reduce_sum(loss_sum) / (info.world_size // par.pp)
        grad_norm = parallel.clip_grad_norm_(params, GRAD_CLIP_NORM, stages, optimizer)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        fp8.weights_changed(model)
        step += 1
        samples += cfg.global_batch_size
        window_samples += cfg.global_batch_size
        finite &= torch.isfinite(loss_sum)
        if step % cfg.log_freq == 0 or step in (next_eval, max_steps):
            if dist.any_rank(~finite):
                print(f"llama: non-finite loss by step {step}; ending the run as aborted", file=sys.stderr)
                break
            if info.is_main and step % cfg.log_freq == 0:
                print(
                    f"step {step} samples {samples} loss {loss_sum.item():.4f} lr {lr:.3e} "
                    f"grad_norm {grad_norm.item():.3f}",
                    flush=True,
                )
        if step != next_eval:
            continue
        if on_gpu:
            torch.cuda.synchronize()
        train_seconds = time.perf_counter() - window_start
        mllog.event(
            "tracked_stats",
            {"throughput": window_samples / train_seconds, "train_loss": loss_sum.item(), "lr": lr},
            metadata={"samples_count": samples, "step": step},
        )
        mllog.end(constants.BLOCK_STOP, metadata={"samples_count": samples})
        in_block = False
        mllog.start(constants.EVAL_START, metadata={"samples_count": samples})
        if validation is None:  # read once, at the first evaluation
            validation = data.load_validation(
                paths["valid"], cfg.eval_samples, cfg.seq_length, shape.vocab_size
            )
        val_loss = evaluate(model, validation, par, dp_rank, cfg.micro_batch_size, info.device, autocast, fp8,
                            schedule, mesh, loss_fn)  # fmt: skip
        mllog.event(
            constants.EVAL_ACCURACY, val_loss, metadata={"samples_count": samples, "epoch_num": samples}
        )
        mllog.end(constants.EVAL_STOP, metadata={"samples_count": samples})
        if info.is_main:
            print(
                f"eval at {samples} samples: log-perplexity {val_loss:.4f} (target {cfg.target})", flush=True
            )
        if val_loss <= cfg.target:
            status = constants.SUCCESS
            break
        if not math.isfinite(val_loss):
            break
        next_eval += eval_every
        mllog.start(constants.BLOCK_START, metadata={"samples_count": samples})
        in_block, window_start, window_samples = True, time.perf_counter(), 0
    if in_block:
        mllog.end(constants.BLOCK_STOP, metadata={"samples_count": samples})
    mllog.event(constants.TRAIN_SAMPLES, samples)
    mllog.end(constants.RUN_STOP, metadata={"samples_count": samples, "status": status})
    dist.barrier()  # no collective still in flight when the process group is torn down
    dist.shutdown()
    return 0 if status == constants.SUCCESS else 1


def log_hyperparameters(mllog: MLLogger, cfg: LlamaPretrainConfig, par: Parallelism) -> None:
    """Every key closed_llama31_8b.yaml (5.1.0) requires, with the values the rules fix, plus the target
    (read by our scorer) and the parallel layout (6.0 keys; 5.1's checker ignores them)."""
    mllog.hyperparameters(
        {
            constants.GLOBAL_BATCH_SIZE: cfg.global_batch_size,
            constants.GRADIENT_ACCUMULATION_STEPS: par.grad_accum,
            constants.MAX_SEQUENCE_LENGTH: cfg.seq_length,
            constants.EVAL_SAMPLES: cfg.eval_samples,
            constants.INIT_CHECKPOINT_STEP: 0,
            constants.OPT_NAME: "adamw",
            constants.OPT_BASE_LR: cfg.max_lr,
            constants.OPT_ADAMW_BETA_1: ADAMW_BETAS[0],
            constants.OPT_ADAMW_BETA_2: ADAMW_BETAS[1],
            constants.OPT_ADAMW_EPSILON: ADAMW_EPS,
            constants.OPT_ADAMW_WEIGHT_DECAY: WEIGHT_DECAY,
            constants.OPT_GRADIENT_CLIP_NORM: GRAD_CLIP_NORM,
            constants.OPT_END_LR: cfg.end_lr(),
            constants.OPT_LR_WARMUP_STEPS: cfg.warmup_steps,
            constants.OPT_LR_DECAY_STEPS: cfg.decay_steps(),
            constants.OPT_LR_DECAY_SCHEDULE: LR_SCHEDULE,
            constants.MAX_STEPS: cfg.max_steps,
            "target_accuracy": cfg.target,
            "micro_batch_size": cfg.micro_batch_size,
            "tensor_parallelism": par.tp,
            "pipeline_parallelism": par.pp,
            "context_parallelism": par.cp,
        }
    )
    deviations = cfg.deviations()
    if deviations:
        print(f"llama: {', '.join(deviations)}: this run is NOT a valid MLPerf result", file=sys.stderr)


def pipeline_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """A micro-batch's loss on the last pipeline stage: the mean over its tokens in training; summed over
    labelled tokens and divided by all, so that evaluation can pad with unlabelled (-100) sequences."""
    return cross_entropy(logits, labels, reduction="sum") / labels.numel()


def synthetic_warmup(
    model, cfg: LlamaPretrainConfig, device, autocast, fp8, schedule=None, mesh=None, par=None,
    loss_fn=cross_entropy,
) -> None:  # fmt: skip
    """Compile and warm the kernels before the clock starts, as NVIDIA's RUN_WARMUP_ON_SYNTH_DATA: forward and
    backward passes on random tokens (training and evaluation mode), gradients dropped, no optimizer step, so
    the weights are exactly the initialized ones. No training or validation data is read."""
    if cfg.synthetic_warmup_steps == 0:
        return
    shape = (cfg.micro_batch_size, cfg.seq_length)
    if schedule is not None:  # through the pipeline: the step's micro-batches, then an evaluation pass
        tokens = torch.randint(
            0, cfg.model_shape().vocab_size, (shape[0] * par.grad_accum, shape[1]), device=device
        )
        for train in [True] * cfg.synthetic_warmup_steps + [False]:
            with autocast:
                parallel.pipeline_step(schedule, mesh, tokens, tokens, [], train)
        model.zero_grad(set_to_none=True)
        parallel.reshard(model)
        return
    for _ in range(cfg.synthetic_warmup_steps):
        tokens = torch.randint(0, cfg.model_shape().vocab_size, shape, device=device)
        with autocast, fp8.forward_context():
            loss_fn(model(tokens), tokens).backward()
    model.zero_grad(set_to_none=True)
    model.eval()
    with torch.no_grad(), autocast, fp8.forward_context():
        loss_fn(model(tokens), tokens, reduction="sum")  # the evaluation's loss, compiled here too
    model.train()
    parallel.reshard(model)


@torch.no_grad()
def evaluate(
    model, validation: torch.Tensor, par: Parallelism, dp_rank: int, mbs: int, device, autocast, fp8,
    schedule=None, mesh=None, loss_fn=cross_entropy,
) -> float:  # fmt: skip
    """Mean next-token loss (log-perplexity) over the validation sequences, split across data-parallel ranks.
    Every rank runs the same number of forwards (FSDP gathers weights collectively): a rank out of sequences
    runs a zero-weight one."""
    model.eval()
    mine = validation[dp_rank :: par.dp]
    if schedule is not None:
        return evaluate_pipeline(model, validation, mine, par, mbs, device, autocast, schedule, mesh)
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    batches = math.ceil(math.ceil(len(validation) / par.dp) / mbs)
    for b in range(batches):
        batch, weight = mine[b * mbs : (b + 1) * mbs], 1.0
        if len(batch) == 0:
            batch, weight = validation[:1], 0.0
        batch = batch.to(device, non_blocking=True).long()
        with autocast, fp8.forward_context():
            logits = model(batch[:, :-1])
        totals[0] += weight * loss_fn(logits, batch[:, 1:], reduction="sum").double()
        totals[1] += weight * batch[:, 1:].numel()
    model.train()
    parallel.reshard(model)  # FSDP2 keeps the root gathered after a no-grad forward
    # every rank of a tensor-parallel group adds the same sums: the ratio is unchanged
    loss_sum, count = dist.all_reduce_sum(totals).tolist()
    return loss_sum / count


@torch.no_grad()
def evaluate_pipeline(model, validation, mine, par: Parallelism, mbs: int, device, autocast, schedule, mesh):
    """`evaluate` through the pipeline, a step's micro-batches at a time; the last chunk is padded with
    sequences whose labels are all -100 (ignored), and the last stage turns its per-token means back into
    sums."""
    chunk = mbs * par.grad_accum
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    for b in range(math.ceil(math.ceil(len(validation) / par.dp) / chunk)):
        batch = mine[b * chunk : (b + 1) * chunk].to(device).long()
        # contiguous: the pipeline stages check their inputs' strides against the training micro-batches'
        # (torch 2.11 on the GPUs refused these slices of the (n, seq + 1) rows)
        tokens, labels = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()
        if len(batch) < chunk:
            pad = chunk - len(batch)
            tokens = torch.cat([tokens, validation[:1, :-1].to(device).long().expand(pad, -1)])
            labels = torch.cat([labels, labels.new_full((pad, labels.shape[1]), -100)])
        losses = []
        with autocast:
            parallel.pipeline_step(schedule, mesh, tokens, labels, losses, train=False)
        if losses:
            totals[0] += sum(float(loss) for loss in losses) * (labels.numel() // par.grad_accum)
            totals[1] += int((labels != -100).sum())
    model.train()
    parallel.reshard(model)
    loss_sum, count = dist.all_reduce_sum(totals).tolist()
    return loss_sum / count


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ConfigError, data.DataError, FileNotFoundError, ValueError) as err:
        print(f"llama: error: {err}", file=sys.stderr)
        sys.exit(2)
