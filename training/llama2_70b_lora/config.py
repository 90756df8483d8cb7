"""The Llama 2 70B LoRA fine-tuning run's settings, read once from the sourced config.

Names are AMD's and NVIDIA's (`LR`, `MAX_STEPS`, `MINIBS`, `MBS`, `SKIP_EVALS`, `VAL_CHECK_INTERVAL`,
`LORA_DIM`, `LORA_ALPHA`, `LORA_DROPOUT`, `WEIGHT_DECAY`, `GRADIENT_CLIP_VAL`, `MAX_SEQLEN`, `FP8`, `ACL`,
`WARMUP_RATIO`, `MIN_LR`, `TP`, `PP`, `CP`), with the defaults of their recipe (their NeMo yaml,
`megatron_gpt_peft_tuning_config.yaml`): GBS = MINIBS x GPUs / (TP x PP x CP) (8 on one node), AdamW 0.9 /
0.999 / 1e-8, weight decay 1e-4, clip 0.3, NeMo's CosineAnnealing from LR to MIN_LR (0) over MAX_STEPS
after a linear warm-up of int(WARMUP_RATIO x MAX_STEPS) steps (none), LoRA rank 16, alpha 32, dropout 0.1 on
the fused q|k|v and output projections of every block. The first evaluation comes after (SKIP_EVALS + 1) x
VAL_CHECK_INTERVAL samples, then one every VAL_CHECK_INTERVAL samples, over the whole validation set.
Changing what the closed rules fix (the target, the sequence length, the rank, the model) is logged as not a
valid MLPerf result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from training import benchmarks
from training.common.config import ConfigError, var
from training.common.mlperf_loop import Schedule
from training.llama.build import RunSpec
from training.llama.checkpoint import shape_from_hf_config
from training.llama.model import PRESETS, LlamaShape
from training.llama.optim import cosine_with_warmup
from training.llama.parallel import Parallelism, feature_problems, layout
from training.llama.settings import LlamaRunSettings
from training.llama2_70b_lora import folders
from training.lora import LoraSettings
from training.lora.fused import KERNEL_CHOICES

BENCHMARK = benchmarks.BENCHMARKS["llama2_70b_lora"]
ADAMW_BETAS = (0.9, 0.999)
ADAMW_EPS = 1e-8
OFFICIAL = {"target": BENCHMARK.target, "max_seq_length": 8192, "lora_rank": 16}


@dataclass(frozen=True, kw_only=True)
class LoraConfig(LlamaRunSettings):
    BENCHMARK = BENCHMARK  # its row of the table: the shared checks read its name and ruleset

    datadir: Path = var(
        "DATADIR", help="folder with data/{train,validation}.npy and model/ (Llama 2 70B, HF)"
    )
    model_dir: Path | None = var("MODEL", None, help="the Hugging Face checkpoint; default DATADIR/model")
    init_checkpoint: str = var(
        "INIT_CHECKPOINT", "model", help="'model': load MODEL's weights; 'none': random base weights (perf)"
    )
    minibs: int = var(
        "MINIBS",
        help="sequences per data-parallel rank per optimizer step (GBS = MINIBS x GPUs / (TP x PP x CP))",
        bounds="> 0",
    )
    micro_batch_size: int = var(
        "MBS", 1, help="sequences per GPU per forward", aliases=("MICRO_BATCH_SIZE",), bounds="> 0"
    )
    lr: float = var(
        "LR",
        4e-4,
        help="peak learning rate (cosine to MIN_LR over MAX_STEPS); AMD's and NVIDIA's yaml default",
        aliases=("MAX_LR",),
        bounds="> 0",
    )
    max_steps: int = var(
        "MAX_STEPS", 1024, help="optimizer steps: the LR horizon and the run's limit", bounds="> 0"
    )
    warmup_ratio: float = var(
        "WARMUP_RATIO",
        0.0,
        help="linear warm-up over int(WARMUP_RATIO x MAX_STEPS) steps (NeMo's CosineAnnealing warmup_ratio)",
        bounds="[0, 1)",
    )
    min_lr: float = var("MIN_LR", 0.0, help="the cosine's floor, reached at MAX_STEPS", bounds=">= 0")
    # AMD's and NVIDIA's model-parallel split: GBS counts MINIBS per data-parallel rank of theirs
    tp: int = var(
        "TP",
        1,
        help="NVIDIA's tensor-parallel size: sets GBS with PP and CP; the layout here is FSDP2, with context "
        "parallelism only where the global batch is smaller than the world",
        bounds="> 0",
    )
    pp: int = var("PP", 1, help="NVIDIA's pipeline-parallel size, as TP", bounds="> 0")
    cp: int = var("CP", 1, help="NVIDIA's context-parallel size, as TP", bounds="> 0")
    skip_evals: int | None = var(
        "SKIP_EVALS",
        None,
        help="evaluations skipped before the first (default floor(0.125 x GBS + 2))",
        bounds=">= 0",
    )
    val_check_interval: int = var("VAL_CHECK_INTERVAL", 384, help="samples between evaluations", bounds="> 0")
    target: float = var("TARGET", BENCHMARK.target, help="validation loss to reach", bounds="> 0")
    lora_rank: int = var("LORA_DIM", 16, aliases=("LORA_RANK",), bounds="> 0")
    lora_alpha: float = var("LORA_ALPHA", 32.0, bounds="> 0")
    lora_dropout: float = var("LORA_DROPOUT", 0.1, bounds="[0, 1)")
    lora_kernel: str = var(
        "LORA_KERNEL", "auto", help="auto (GPUs: dropout and A in one checked Triton kernel) | pytorch"
    )
    weight_decay: float = var("WEIGHT_DECAY", 1e-4, bounds=">= 0")
    clip_norm: float = var("GRADIENT_CLIP_VAL", 0.3, help="gradient clipping by global norm", bounds="> 0")
    seq_length: int = var(
        "MAX_SEQLEN", 8192, help="rows of the data are this long", aliases=("SEQ_LENGTH",), bounds="> 0"
    )
    num_layers: int | None = var(
        "NUM_LAYERS",
        None,
        help="fewer blocks than the checkpoint's (perf only)",
        aliases=("OVERWRITTEN_NUM_LAYERS",),
        bounds="> 0",
    )
    fp8_weights: bool = var(
        "FP8_WEIGHTS",
        False,
        help="PRECISION=fp8, FP8_BACKEND=native: the frozen base stored in FP8 (under FSDP2 as FP8 shards, "
        "all-gathered as stored)",
    )
    checkpoint_layers: int | None = var(
        "ACL",
        None,
        help="with ACTIVATION_CHECKPOINTING: recompute only the first ACL blocks (AMD's MI300X: 21)",
        bounds=">= 0",
    )
    keep_attention: bool = var(
        "AC_KEEP_ATTENTION",
        False,
        help="with ACTIVATION_CHECKPOINTING: recompute all but the attention kernel (0.13-0.28 GiB a block)",
    )
    offload_layers: int = var(
        "ACTIVATION_OFFLOAD_LAYERS",
        0,
        help="one GPU: the blocks after the ACL recomputed ones keep what their forward saves for the "
        "backward in pinned host memory, copied out and back beside the compute",
        bounds=">= 0",
    )
    warmup: bool = var(
        "WARMUP", True, help="untimed synthetic training and validation steps before run_start"
    )
    warmup_train_steps: int = var("WARMUP_TRAIN_STEPS", 5, bounds=">= 0")

    def __post_init__(self):
        problems = self.shared_problems()
        if problems:  # the checks below divide by these numbers
            raise ConfigError("; ".join(problems))
        if self.model_parallel() == 1 and self.minibs % self.micro_batch_size:
            problems.append(f"MINIBS={self.minibs} is not a multiple of MBS={self.micro_batch_size}")
        if self.min_lr > self.lr:
            problems.append(
                f"MIN_LR={self.min_lr} is above LR={self.lr} (NeMo's CosineAnnealing refuses it too)"
            )
        if self.checkpoint_layers is not None and not self.activation_checkpointing:
            problems.append(f"ACL={self.checkpoint_layers} needs ACTIVATION_CHECKPOINTING=1")
        if self.offload_layers and self.world_size() > 1:
            problems.append(
                f"ACTIVATION_OFFLOAD_LAYERS={self.offload_layers} is built for one GPU; this config has "
                f"DGXNNODES x DGXNGPU = {self.world_size()} (set it to 0)"
            )
        if self.keep_attention and not self.activation_checkpointing:
            problems.append("AC_KEEP_ATTENTION=1 needs ACTIVATION_CHECKPOINTING=1")
        if self.fp8_weights and not (self.fp8 and self.fp8_backend == "native"):
            problems.append("FP8_WEIGHTS=1 needs PRECISION=fp8 and FP8_BACKEND=native")
        if self.init_checkpoint not in ("model", "none"):
            problems.append(f"INIT_CHECKPOINT={self.init_checkpoint!r} is not one of model, none")
        problems += self.llama_problems()
        if self.lora_kernel not in KERNEL_CHOICES:
            problems.append(f"LORA_KERNEL={self.lora_kernel!r} is not one of {', '.join(KERNEL_CHOICES)}")
        if problems:
            raise ConfigError("; ".join(problems))

    # ---- derived values ----
    def model_parallel(self) -> int:
        """TP x PP x CP: the GPUs that share each sequence in NVIDIA's layout."""
        return self.tp * self.pp * self.cp

    def global_batch_size(self, world_size: int) -> int:
        """MINIBS x data-parallel ranks, as AMD's and NVIDIA's yaml: MINIBS x GPUs / (TP x PP x CP)."""
        return self.minibs * (world_size // self.model_parallel())

    def synthetic_warmup_passes(self) -> int:
        return self.warmup_train_steps if self.warmup else 0

    def parallelism(self, world_size: int) -> Parallelism:
        """FSDP2 over every GPU, each taking whole sequences where the global batch allows it (GBS / world
        each, in forwards of MBS); where NVIDIA's TP x PP x CP leave fewer sequences than GPUs, each sequence
        is split over the fewest GPUs that give every GPU a share (`context_split`: PyTorch's context
        parallelism, ring attention), the data-parallel size and so GBS, the recipe and the data order as
        theirs. A ConfigError naming the variables where neither fits."""
        split, gbs = self.model_parallel(), self.global_batch_size(world_size)
        if world_size % split:
            raise ConfigError(
                f"TP x PP x CP = {self.tp} x {self.pp} x {self.cp} = {split} does not divide "
                f"the world size {world_size} (DGXNNODES x DGXNGPU)"
            )
        cp = self.context_split(world_size)
        problems = feature_problems(
            1,
            1,
            cp,
            self.fp8_backend if self.fp8 else None,
            self.compile,
            self.seq_length,
            self.num_layers or 1,
        )
        if problems:
            raise ConfigError(
                f"{world_size} GPUs for GBS {gbs} split each sequence over {cp} of them: "
                + "; ".join(problems)
            )
        return layout(world_size, 1, 1, cp, gbs, self.micro_batch_size)

    def substitutions(self, world_size: int) -> list[str]:
        """NVIDIA's TP x PP x CP, as laid out here (`parallelism`)."""
        out = super().substitutions(world_size)
        if self.model_parallel() == 1:
            return out
        try:
            par = self.parallelism(world_size)
        except ConfigError:  # the preflight's scale check says why
            return out
        split = (
            f"each sequence over {par.cp} GPUs (context parallelism)"
            if par.cp > 1
            else (f"{self.global_batch_size(world_size) // world_size} whole sequence(s) per GPU")
        )
        out.append(
            f"TP={self.tp} PP={self.pp} CP={self.cp} (NVIDIA's split of each sequence) set GBS "
            f"{self.global_batch_size(world_size)}; here FSDP2 over the {world_size} GPUs, {split}: the "
            "same data-parallel ranks' batches, so the same recipe (LoRA with tensor or pipeline "
            "parallelism is not implemented here)"
        )
        return out

    def context_split(self, world_size: int) -> int:
        """How many GPUs share each sequence: 1 where every GPU can take whole sequences (GBS a multiple of
        MBS x world), else the smallest divisor of the world that leaves each data-parallel rank a whole
        number of micro-batches (NVIDIA's TP x PP x CP at most, which does by construction)."""
        gbs = self.global_batch_size(world_size)
        for cp in range(1, self.model_parallel() + 1):
            if world_size % cp == 0 and gbs % (self.micro_batch_size * (world_size // cp)) == 0:
                return cp
        raise ConfigError(
            f"GBS = MINIBS x GPUs / (TP x PP x CP) = {self.minibs} x {world_size} / {self.model_parallel()} "
            f"= {gbs} is not a multiple of MBS={self.micro_batch_size} x the data-parallel ranks"
        )

    def warmup_steps(self) -> int:
        """NeMo's int(warmup_ratio x max_steps)."""
        return int(self.warmup_ratio * self.max_steps)

    def lr_schedule(self) -> str:
        """The schedule as logged (opt_learning_rate_decay_schedule)."""
        warmup = self.warmup_steps()
        ramp = f"linear warm-up of {warmup} steps" if warmup else "no warm-up"
        return f"cosine to {self.min_lr:g}, {ramp}"

    def learning_rate(self, step: int) -> float:
        """The LR of optimizer step `step` (from 0): NeMo's CosineAnnealing (constant_steps 0), as AMD's and
        NVIDIA's yaml configure it."""
        return cosine_with_warmup(step, self.lr, self.warmup_steps(), self.max_steps, self.min_lr)

    def evals_skipped(self, world_size: int) -> int:
        """The MLPerf rule's default: floor(0.125 x GBS + 2) evaluations skipped (3 at GBS 8)."""
        gbs = self.global_batch_size(world_size)
        return self.skip_evals if self.skip_evals is not None else math.floor(0.125 * gbs + 2)

    def eval_steps(self, world_size: int) -> tuple[int, int]:
        """(first, every): optimizer steps of the first evaluation and between evaluations."""
        every = math.ceil(self.val_check_interval / self.global_batch_size(world_size))
        return (self.evals_skipped(world_size) + 1) * every, every

    def schedule(self, world_size: int) -> Schedule:
        """The run as the loop runs it: GBS, MAX_STEPS, the evaluations up to it and LOG_FREQ."""
        first, every = self.eval_steps(world_size)
        gbs = self.global_batch_size(world_size)
        return Schedule(gbs, self.max_steps, range(first, self.max_steps + 1, every), self.log_freq)

    def no_evaluation(self, world_size: int) -> str | None:
        schedule = self.schedule(world_size)
        if schedule.evaluates():
            return None
        first, every = self.eval_steps(world_size)
        gbs, last = schedule.global_batch, self.max_steps
        skipped = f"SKIP_EVALS={self.evals_skipped(world_size)}" + (
            "" if self.skip_evals is not None else " (the default, floor(0.125 x GBS + 2))"
        )
        if last >= every:
            fewer = f"SKIP_EVALS <= {last // every - 1}"
        else:
            fewer = ("SKIP_EVALS=0 and " if first > every else "") + f"VAL_CHECK_INTERVAL <= {last * gbs}"
        return (
            "no evaluation scheduled: LoRA evaluates after (SKIP_EVALS + 1) x ceil(VAL_CHECK_INTERVAL / "
            "GBS) steps, then every ceil(VAL_CHECK_INTERVAL / GBS), until the run stops at MAX_STEPS (AMD's "
            f"and NVIDIA's NeMo); {skipped}, VAL_CHECK_INTERVAL={self.val_check_interval} and GBS={gbs} put "
            f"the first after step {first}, past MAX_STEPS={last}, so the run could not reach its target: "
            f"set MAX_STEPS >= {first}, or {fewer}"
        )

    def model_shape(self) -> LlamaShape:
        """The checkpoint's shape (its config.json), or Llama 2 70B's without one (INIT_CHECKPOINT=none), at
        the run's sequence length; NUM_LAYERS keeps the first blocks only."""
        folder = self.paths()["model"]
        base = shape_from_hf_config(folder) if (folder / "config.json").exists() else PRESETS["70b"]
        return base.replace(num_layers=self.num_layers, max_seq_length=self.seq_length)

    def run_spec(self) -> RunSpec:
        """The run these settings describe: the checkpoint's model (INIT_CHECKPOINT=model) or a random base of
        its shape, the adapters of rank LORA_DIM on every block, AdamW over the adapters; FP8_WEIGHTS=1: the
        frozen base stored in FP8 (under FSDP2, as FP8 shards)."""
        lora = LoraSettings(self.lora_rank, self.lora_alpha, self.lora_dropout, self.lora_kernel)
        checkpoint = self.paths()["model"] if self.init_checkpoint == "model" else None
        return self.llama_run_spec(
            self.model_shape(),
            self.clip_norm,
            (self.lr, ADAMW_BETAS, ADAMW_EPS, self.weight_decay),
            lora=lora,
            checkpoint_layers=self.checkpoint_layers,
            keep_attention=self.keep_attention,
            offload_layers=self.offload_layers,
            checkpoint=checkpoint,
            fp8_weights=self.fp8_weights,
        )

    def paths(self) -> dict[str, Path]:
        """The rows and the model, in our layout, AMD's or NVIDIA's (`folders`)."""
        data = folders.data_dir(self.datadir)
        return {
            "train": data / "train.npy",
            "valid": data / "validation.npy",
            "model": folders.model_dir(self.datadir, self.model_dir),
        }

    def deviations(self, shape_is_official: bool) -> list[str]:
        """Settings that make this run something other than the MLPerf benchmark."""
        out = []
        if not math.isclose(self.target, OFFICIAL["target"]):
            out.append(f"TARGET={self.target} (MLPerf: {OFFICIAL['target']})")
        if self.seq_length != OFFICIAL["max_seq_length"]:
            out.append(f"MAX_SEQLEN={self.seq_length} (MLPerf: {OFFICIAL['max_seq_length']})")
        if self.lora_rank != OFFICIAL["lora_rank"]:
            out.append(f"LORA_DIM={self.lora_rank} (MLPerf: {OFFICIAL['lora_rank']})")
        if not shape_is_official:
            out.append("the model is not Llama 2 70B")
        if self.init_checkpoint == "none":
            out.append("INIT_CHECKPOINT=none (random base weights)")
        if self.is_cpu_demo:
            out.append("CPU_DEMO=1")
        return out


def is_llama2_70b(shape: LlamaShape) -> bool:
    return shape.replace(max_seq_length=8192) == PRESETS["70b"]
