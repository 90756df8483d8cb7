"""The Llama 3.1 8B pretraining run's settings, read once from the sourced config.

Names are AMD's (`GBS`, `MBS`, `MAX_LR`, `WARMUP_STEPS`, `TARGET`, `EVAL_EVERY`, ...); NVIDIA's names for the
same settings (`LR`, `MICRO_BATCH_SIZE`, `TENSOR_MODEL_PARALLEL`, `TARGET_LOG_PPL`, `VAL_SAMPLES`, `FP8`, ...)
are accepted as aliases. Precision and FP8 are the variables every benchmark shares (`PRECISION=fp8`,
`FP8_BACKEND`). What the MLPerf rules fix (AdamW betas/eps/decay, clip norm, end LR = 0.1 x peak, the
1,200,000-step cosine horizon) is not configurable; the demo-only knobs (sequence length, model size, eval
size, target) are, and a run that changes them is logged as not a valid MLPerf result.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

from training import benchmarks
from training.common.config import FP8_RECIPES, ConfigError, var
from training.common.mlperf_loop import Schedule
from training.llama.build import RunSpec
from training.llama.model import PRESETS, LlamaShape
from training.llama.parallel import Parallelism, feature_problems, layout
from training.llama.settings import LlamaRunSettings

BENCHMARK = benchmarks.BENCHMARKS["llama31_8b"]
# Fixed by the MLPerf Training 5.1 closed rules (closed_llama31_8b.yaml and the benchmark's rules table)
OFFICIAL = {
    "target": BENCHMARK.target,
    "seq_length": 8192,
    "eval_samples": 1024,
    "max_steps": 1_200_000,
    "eval_every": 12288,
}
ADAMW_BETAS = (0.9, 0.95)
ADAMW_EPS = 1e-5
WEIGHT_DECAY = 0.1
GRAD_CLIP_NORM = 1.0
END_LR_FACTOR = 0.1
LR_SCHEDULE = "cosine with linear warmup"


@dataclass(frozen=True, kw_only=True)
class LlamaPretrainConfig(LlamaRunSettings):
    BENCHMARK = BENCHMARK  # its row of the table: the shared checks read its name and ruleset
    # (the third number of AMD's and NVIDIA's Llama config names is not MBS: MI355X_1x8x1 has MBS 2)
    datadir: Path = var("DATADIR", help="folder with the preprocessed C4 .bin/.idx files")
    model_dir: Path | None = var(
        "MODEL",
        None,
        help="AMD's model folder (mounted at /model, as AMD's run_with_docker.sh does): the tokenizer the C4 "
        "data was made with; its vocabulary is checked against the model's (the data is already tokenized "
        "and training starts from random weights, as AMD's and NVIDIA's 8B)",
    )
    gbs: int = var("GBS", help="sequences per optimizer step", aliases=("GLOBAL_BATCH_SIZE",), bounds="> 0")
    micro_batch_size: int = var(
        "MBS", help="sequences per GPU per forward", aliases=("MICRO_BATCH_SIZE",), bounds="> 0"
    )
    max_lr: float = var("MAX_LR", help="peak learning rate", aliases=("LR",), bounds="> 0")
    warmup_steps: int = var("WARMUP_STEPS", help="linear warm-up, optimizer steps", bounds=">= 0")
    train_prefix: str = var(
        "TRAIN_DATA_PREFIX", "c4-train.en_6_text_document", help="under DATADIR, or absolute"
    )
    valid_prefix: str = var("VALID_DATA_PREFIX", "c4-validation-91205-samples.en_text_document")
    index_cache_dir: Path | None = var(
        "INDEX_CACHE_DIR",
        None,
        help="writable; default <tmp>/llama31_8b_npy_index",
        aliases=("NPY_INDEX_DIR",),
    )
    max_steps: int = var(
        "MAX_STEPS", OFFICIAL["max_steps"], help="cosine horizon in optimizer steps", bounds="> 0"
    )
    eval_every: int = var(
        "EVAL_EVERY", OFFICIAL["eval_every"], help="samples between evaluations", bounds="> 0"
    )
    start_eval_at: int = var(
        "START_EVAL_AT", 0, help="first evaluation after this many samples (0: EVAL_EVERY)", bounds=">= 0"
    )
    eval_samples: int = var("EVAL_SAMPLES", OFFICIAL["eval_samples"], aliases=("VAL_SAMPLES",), bounds="> 0")
    target: float = var(
        "TARGET",
        OFFICIAL["target"],
        help="validation log-perplexity to reach",
        aliases=("TARGET_LOG_PPL",),
        bounds="> 0",
    )
    max_samples_termination: int | None = var(
        "MAX_SAMPLES_TERMINATION",
        None,
        help="end the run 'aborted' after this many samples (default MAX_STEPS x GBS; AMD and NVIDIA set "
        "none); the data order does not depend on it",
        bounds="> 0",
    )
    seq_length: int = var(
        "SEQ_LENGTH", OFFICIAL["seq_length"], aliases=("MAX_SEQUENCE_LENGTH",), bounds="> 0"
    )
    model_size: str = var("MODEL_SIZE", "8b", help="preset: " + " | ".join(PRESETS), aliases=("SIZE",))
    num_layers: int | None = var(
        "NUM_LAYERS", None, help="override the preset", aliases=("OVERWRITTEN_NUM_LAYERS",), bounds="> 0"
    )
    hidden_size: int | None = var("HIDDEN_SIZE", None, bounds="> 0")
    ffn_hidden_size: int | None = var("FFN_HIDDEN_SIZE", None, bounds="> 0")
    num_attention_heads: int | None = var("NUM_ATTENTION_HEADS", None, bounds="> 0")
    num_query_groups: int | None = var("NUM_QUERY_GROUPS", None, help="KV heads", bounds="> 0")
    vocab_size: int | None = var("VOCAB_SIZE", None, bounds="> 0")
    tp: int = var("TENSOR_MODEL_PARALLEL_SIZE", 1, aliases=("TP", "TENSOR_MODEL_PARALLEL"), bounds="> 0")
    pp: int = var("PIPELINE_MODEL_PARALLEL_SIZE", 1, aliases=("PP", "PIPELINE_MODEL_PARALLEL"), bounds="> 0")
    cp: int = var("CONTEXT_PARALLEL_SIZE", 1, aliases=("CP", "CONTEXT_PARALLEL"), bounds="> 0")
    fp8_recipe: str = var("FP8_RECIPE", "tensorwise", help="torchao recipe: tensorwise | rowwise")
    synthetic_warmup_steps: int = var(
        "SYNTHETIC_WARMUP_STEPS",
        0,
        help="forward+backward passes on random tokens before run_start (compiles; no weight update)",
        bounds=">= 0",
    )
    num_workers: int = var("NUM_WORKERS", 2, help="training data loader processes per rank", bounds=">= 0")

    def __post_init__(self):
        problems = self.shared_problems() + self.llama_problems()
        if self.warmup_steps >= self.max_steps:
            problems.append(f"WARMUP_STEPS={self.warmup_steps} must be in [0, MAX_STEPS={self.max_steps})")
        for name, value, choices in (
            ("MODEL_SIZE", self.model_size, tuple(PRESETS)),
            ("FP8_RECIPE", self.fp8_recipe, FP8_RECIPES),
        ):
            if value not in choices:
                problems.append(f"{name}={value!r} is not one of {', '.join(choices)}")
        if problems:
            raise ConfigError("; ".join(problems))
        shape = self.model_shape()
        tp, pp, cp = self.model_layout()
        problems += feature_problems(
            tp,
            pp,
            cp,
            self.fp8_backend if self.fp8 else None,
            self.compile,
            self.seq_length,
            shape.num_layers,
        )
        problems += shape_problems(shape, tp)
        if problems:
            raise ConfigError("; ".join(problems))

    # ---- derived values ----

    def global_batch_size(self, world_size: int | None = None) -> int:
        """Sequences per optimizer step (GBS; the same on any number of GPUs)."""
        return self.gbs

    def synthetic_warmup_passes(self) -> int:
        return self.synthetic_warmup_steps

    def parallelism(self, world_size: int) -> Parallelism:
        """The layout of `world_size` ranks (ConfigError naming the variables if it does not fit)."""
        return layout(world_size, *self.model_layout(), self.gbs, self.micro_batch_size)

    def model_layout(self) -> tuple[int, int, int]:
        """(TP, PP, CP) as run. Tensor and context parallelism together (NVIDIA's 8B at 128 nodes: TP 2 x
        CP 4) run as context parallelism over their product: the same GPUs share each sequence, so the
        data-parallel size, the global batch and the data order are the configured ones."""
        if self.tp > 1 and self.cp > 1:
            return 1, self.pp, self.tp * self.cp
        return self.tp, self.pp, self.cp

    def substitutions(self, world_size: int) -> list[str]:
        out = super().substitutions(world_size)
        if self.tp > 1 and self.cp > 1:
            out.append(
                f"TENSOR_MODEL_PARALLEL_SIZE={self.tp} with CONTEXT_PARALLEL_SIZE={self.cp} runs as "
                f"CONTEXT_PARALLEL_SIZE={self.tp * self.cp}: tensor and context parallelism together are "
                "not implemented here; each sequence is shared by as many GPUs, so the data-parallel size, "
                "global batch and recipe are the config's"
            )
        return out

    def model_shape(self) -> LlamaShape:
        return PRESETS[self.model_size].replace(
            num_layers=self.num_layers,
            hidden_size=self.hidden_size,
            ffn_hidden_size=self.ffn_hidden_size,
            num_heads=self.num_attention_heads,
            num_kv_heads=self.num_query_groups,
            vocab_size=self.vocab_size,
            max_seq_length=self.seq_length,
        )

    def run_spec(self) -> RunSpec:
        """The run these settings describe, trained from scratch, AdamW with the rules' fixed values."""
        adamw = (self.max_lr, ADAMW_BETAS, ADAMW_EPS, WEIGHT_DECAY)
        return self.llama_run_spec(self.model_shape(), GRAD_CLIP_NORM, adamw, fp8_recipe=self.fp8_recipe)

    def end_lr(self) -> float:
        return END_LR_FACTOR * self.max_lr

    def decay_steps(self) -> int:
        return self.max_steps - self.warmup_steps

    def sample_limit(self) -> int:
        """Samples after which a run that has not reached the target ends `aborted`."""
        return self.max_samples_termination or self.max_steps * self.gbs

    def max_train_steps(self) -> int:
        return min(self.max_steps, math.ceil(self.sample_limit() / self.gbs))

    def index_samples(self) -> int:
        """The training samples the dataset index is built for: MAX_STEPS x GBS, NeMo's num_train_samples
        (PreTrainingDataModule.build; AMD's train.py sets it so). The number decides how many epochs of
        shuffled documents the index holds, and so the order of the samples for a seed."""
        return self.max_steps * self.gbs

    def eval_steps(self) -> tuple[int, int]:
        """(first, every): optimizer steps of the first evaluation and between evaluations, as AMD's
        val_check_interval = ceil(EVAL_EVERY / GBS)."""
        every = math.ceil(self.eval_every / self.gbs)
        first = math.ceil(self.start_eval_at / self.gbs) if self.start_eval_at else every
        return first, every

    def schedule(self) -> Schedule:
        """The run as the loop runs it: GBS, its last step, the evaluations up to it and LOG_FREQ."""
        (first, every), last = self.eval_steps(), self.max_train_steps()
        return Schedule(self.gbs, last, range(first, last + 1, every), self.log_freq)

    def no_evaluation(self, world_size: int) -> str | None:
        schedule = self.schedule()
        if schedule.evaluates():
            return None
        first, last = self.eval_steps()[0], schedule.max_steps
        earlier = "START_EVAL_AT" if self.start_eval_at else "EVAL_EVERY"
        limits = [f"MAX_STEPS >= {first}"] if first > self.max_steps else []
        if self.max_samples_termination and math.ceil(self.max_samples_termination / self.gbs) < first:
            limits.append(f"MAX_SAMPLES_TERMINATION > {(first - 1) * self.gbs}")
        return (
            "no evaluation scheduled: Llama 3.1 8B evaluates after START_EVAL_AT samples (0: EVAL_EVERY), "
            "then every EVAL_EVERY, until the run stops at MAX_STEPS steps or MAX_SAMPLES_TERMINATION "
            f"samples; START_EVAL_AT={self.start_eval_at}, EVAL_EVERY={self.eval_every} and GBS={self.gbs} "
            f"put the first after step {first}, past the last, step {last} (MAX_STEPS={self.max_steps}, "
            f"MAX_SAMPLES_TERMINATION={self.max_samples_termination or 'unset'}), so the run could not reach "
            f"its target: set {earlier} <= {last * self.gbs}, or {' and '.join(limits)}"
        )

    def deviations(self) -> list[str]:
        """Settings that make this run something other than the MLPerf benchmark."""
        out = [
            f"{name.upper()}={getattr(self, name)} (MLPerf: {value})"
            for name, value in OFFICIAL.items()
            if name != "eval_every" and getattr(self, name) != value
        ]
        if self.model_shape() != PRESETS["8b"].replace(max_seq_length=self.seq_length):
            out.append(f"MODEL_SIZE={self.model_size} with overrides (MLPerf: Llama 3.1 8B)")
        if self.is_cpu_demo:
            out.append("CPU_DEMO=1")
        return out

    def paths(self) -> dict[str, Path]:
        def under_datadir(prefix: str) -> Path:
            return Path(prefix) if Path(prefix).is_absolute() else self.datadir / prefix

        cache = self.index_cache_dir or Path(tempfile.gettempdir()) / "llama31_8b_npy_index"
        return {
            "train": under_datadir(self.train_prefix),
            "valid": under_datadir(self.valid_prefix),
            "cache": cache,
            "model": self.model_dir,
        }

    def model_problems(self) -> list[str]:
        """MODEL (when set): a folder, whose config.json (a Hugging Face model's, as AMD's download holds)
        gives the vocabulary the model is built with."""
        if self.model_dir is None:
            return []
        if not self.model_dir.is_dir():
            return [f"MODEL={self.model_dir}: no such folder (AMD's model/tokenizer download)"]
        config = self.model_dir / "config.json"
        if not config.is_file():
            return []
        try:
            vocab = json.loads(config.read_text()).get("vocab_size")
        except (OSError, ValueError) as err:
            return [f"MODEL={self.model_dir}: {config.name} cannot be read ({err})"]
        have = self.model_shape().vocab_size
        if vocab is not None and vocab != have:
            return [
                f"MODEL={self.model_dir}: its config.json has vocab_size {vocab}, the model here {have}: "
                "not the tokenizer the C4 data was made with"
            ]
        return []


def shape_problems(shape: LlamaShape, tp: int) -> list[str]:
    problems = []
    if shape.hidden_size % shape.num_heads or shape.num_heads % shape.num_kv_heads:
        problems.append(
            f"HIDDEN_SIZE={shape.hidden_size} / NUM_ATTENTION_HEADS={shape.num_heads} / "
            f"NUM_QUERY_GROUPS={shape.num_kv_heads}: heads must divide the hidden size and be a "
            "multiple of the KV heads"
        )
    elif shape.head_dim % 2:
        problems.append(f"head dimension {shape.head_dim} must be even (RoPE)")
    for name, value in (
        ("NUM_QUERY_GROUPS", shape.num_kv_heads),
        ("NUM_ATTENTION_HEADS", shape.num_heads),
        ("FFN_HIDDEN_SIZE", shape.ffn_hidden_size),
    ):
        if value % tp:
            problems.append(f"{name}={value} is not divisible by TENSOR_MODEL_PARALLEL_SIZE={tp}")
    return problems
