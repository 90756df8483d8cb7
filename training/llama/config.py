"""The Llama 3.1 8B pretraining run's settings, read once from the sourced config.

Names are AMD's (`GBS`, `MBS`, `MAX_LR`, `WARMUP_STEPS`, `TARGET`, `EVAL_EVERY`, ...); NVIDIA's names for the
same settings (`LR`, `MICRO_BATCH_SIZE`, `TENSOR_MODEL_PARALLEL`, `TARGET_LOG_PPL`, `VAL_SAMPLES`, ...) are
accepted as aliases. What the MLPerf rules fix (AdamW betas/eps/decay, clip norm, end LR = 0.1 x peak, the
1,200,000-step cosine horizon) is not configurable; the demo-only knobs (sequence length, model size, eval
size, target) are, and a run that changes them is logged as not a valid MLPerf result.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

from training.common.config import FP8_BACKENDS, ConfigError, RunSettings, from_env, var
from training.llama.model import PRESETS, LlamaShape

BENCHMARK = "llama31_8b"
# Fixed by the MLPerf Training 5.1 closed rules (closed_llama31_8b.yaml and the benchmark's rules table)
OFFICIAL = {
    "target": 3.3,
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

PRECISIONS = ("auto", "fp32", "bf16")
FP8_RECIPES = ("tensorwise", "rowwise")
ATTENTIONS = ("auto", "sdpa", "flash_attn")


@dataclass(frozen=True)
class Parallelism:
    """How the world splits: world = dp x tp x pp x cp; GBS = MBS x dp x grad_accum."""

    world_size: int
    tp: int
    pp: int
    cp: int
    dp: int
    grad_accum: int


@dataclass(frozen=True, kw_only=True)
class LlamaPretrainConfig(RunSettings):
    datadir: Path = var("DATADIR", help="folder with the preprocessed C4 .bin/.idx files")
    global_batch_size: int = var("GBS", help="sequences per optimizer step", aliases=("GLOBAL_BATCH_SIZE",))
    micro_batch_size: int = var("MBS", help="sequences per GPU per forward", aliases=("MICRO_BATCH_SIZE",))
    max_lr: float = var("MAX_LR", help="peak learning rate", aliases=("LR",))
    warmup_steps: int = var("WARMUP_STEPS", help="linear warm-up, optimizer steps")
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
    max_steps: int = var("MAX_STEPS", OFFICIAL["max_steps"], help="cosine horizon in optimizer steps")
    eval_every: int = var("EVAL_EVERY", OFFICIAL["eval_every"], help="samples between evaluations")
    start_eval_at: int = var(
        "START_EVAL_AT", 0, help="first evaluation after this many samples (0: EVAL_EVERY)"
    )
    eval_samples: int = var("EVAL_SAMPLES", OFFICIAL["eval_samples"], aliases=("VAL_SAMPLES",))
    target: float = var(
        "TARGET", OFFICIAL["target"], help="validation log-perplexity to reach", aliases=("TARGET_LOG_PPL",)
    )
    max_samples_termination: int | None = var(
        "MAX_SAMPLES_TERMINATION",
        None,
        help="end the run 'aborted' after this many samples (default MAX_STEPS x GBS)",
    )
    seq_length: int = var("SEQ_LENGTH", OFFICIAL["seq_length"], aliases=("MAX_SEQUENCE_LENGTH",))
    model_size: str = var("MODEL_SIZE", "8b", help="preset: " + " | ".join(PRESETS), aliases=("SIZE",))
    num_layers: int | None = var(
        "NUM_LAYERS", None, help="override the preset", aliases=("OVERWRITTEN_NUM_LAYERS",)
    )
    hidden_size: int | None = var("HIDDEN_SIZE", None)
    ffn_hidden_size: int | None = var("FFN_HIDDEN_SIZE", None)
    num_attention_heads: int | None = var("NUM_ATTENTION_HEADS", None)
    num_query_groups: int | None = var("NUM_QUERY_GROUPS", None, help="KV heads")
    vocab_size: int | None = var("VOCAB_SIZE", None)
    tp: int = var("TENSOR_MODEL_PARALLEL_SIZE", 1, aliases=("TP", "TENSOR_MODEL_PARALLEL"))
    pp: int = var("PIPELINE_MODEL_PARALLEL_SIZE", 1, aliases=("PP", "PIPELINE_MODEL_PARALLEL"))
    cp: int = var("CONTEXT_PARALLEL_SIZE", 1, aliases=("CP", "CONTEXT_PARALLEL"))
    precision: str = var("PRECISION", "auto", help="auto (bf16 on GPU, fp32 on CPU) | fp32 | bf16")
    fp8: bool = var("FP8", False, help="FP8 matmuls in the transformer blocks (on top of bf16)")
    fp8_backend: str = var(
        "FP8_BACKEND",
        "auto",
        help="auto (Transformer Engine, else torchao) | te | torchao | native (ours: delayed scaling)",
    )
    fp8_recipe: str = var("FP8_RECIPE", "tensorwise", help="torchao recipe: tensorwise | rowwise")
    fp8_param_gather: bool = var(
        "FP8_PARAM_GATHER",
        True,
        help="FSDP2 (without TP) all-gathers the FP8 linears' weights in FP8 (torchao tensorwise, native)",
    )
    adamw_impl: str = var(
        "ADAMW_IMPL",
        "auto",
        help="auto (GPUs: ours in Triton where it matches torch's fused AdamW there, else torch's) | torch",
    )
    activation_checkpointing: bool = var("ACTIVATION_CHECKPOINTING", False)
    reshard_after_forward: bool = var(
        "RESHARD_AFTER_FORWARD", True, help="0: FSDP2 keeps every block gathered from forward to backward"
    )
    compile: bool = var("COMPILE", False, help="torch.compile each transformer block")
    synthetic_warmup_steps: int = var(
        "SYNTHETIC_WARMUP_STEPS",
        0,
        help="forward+backward passes on random tokens before run_start (compiles; no weight update)",
    )
    attention: str = var("ATTENTION", "auto", help="auto | sdpa | flash_attn")
    num_workers: int = var("NUM_WORKERS", 2, help="training data loader processes per rank")

    def __post_init__(self):
        problems = []
        positive = {
            "GBS": self.global_batch_size,
            "MBS": self.micro_batch_size,
            "MAX_STEPS": self.max_steps,
            "EVAL_EVERY": self.eval_every,
            "EVAL_SAMPLES": self.eval_samples,
            "SEQ_LENGTH": self.seq_length,
            "TENSOR_MODEL_PARALLEL_SIZE": self.tp,
            "PIPELINE_MODEL_PARALLEL_SIZE": self.pp,
            "CONTEXT_PARALLEL_SIZE": self.cp,
            "LOG_FREQ": self.log_freq,
            "DGXNNODES": self.num_nodes,
            "DGXNGPU": self.gpus_per_node,
        }
        problems += [f"{name}={value} must be > 0" for name, value in positive.items() if value <= 0]
        if not self.max_lr > 0:
            problems.append(f"MAX_LR={self.max_lr} must be > 0")
        if not 0 <= self.warmup_steps < self.max_steps:
            problems.append(f"WARMUP_STEPS={self.warmup_steps} must be in [0, MAX_STEPS={self.max_steps})")
        if min(self.start_eval_at, self.num_workers, self.synthetic_warmup_steps) < 0:
            problems.append("START_EVAL_AT, NUM_WORKERS and SYNTHETIC_WARMUP_STEPS must be >= 0")
        if not self.target > 0:
            problems.append(f"TARGET={self.target} must be > 0 (a validation log-perplexity)")
        if self.max_samples_termination is not None and self.max_samples_termination <= 0:
            problems.append(f"MAX_SAMPLES_TERMINATION={self.max_samples_termination} must be > 0")
        for name, value, choices in (
            ("MODEL_SIZE", self.model_size, tuple(PRESETS)),
            ("PRECISION", self.precision, PRECISIONS),
            ("FP8_BACKEND", self.fp8_backend, FP8_BACKENDS),
            ("FP8_RECIPE", self.fp8_recipe, FP8_RECIPES),
            ("ADAMW_IMPL", self.adamw_impl, ("auto", "torch")),
            ("ATTENTION", self.attention, ATTENTIONS),
        ):
            if value not in choices:
                problems.append(f"{name}={value!r} is not one of {', '.join(choices)}")
        if self.pp > 1:
            pp = "PIPELINE_MODEL_PARALLEL_SIZE>1"
            # only torchao's stateless scaling is tested with pipelines: Transformer Engine would need its
            # autocast around the schedule's forwards, and PyTorch's stage infers its shapes by running
            # forward and backward on uninitialized tensors, whose amax would become the native FP8 scales
            not_torchao = self.fp8 and self.fp8_backend != "torchao"
            backend = f"FP8=1 and FP8_BACKEND={self.fp8_backend} (torchao runs)"
            others = [n for n, on in (("TENSOR_MODEL_PARALLEL_SIZE>1", self.tp > 1),
                                      ("CONTEXT_PARALLEL_SIZE>1", self.cp > 1),
                                      (backend, not_torchao),
                                      ("COMPILE=1", self.compile)) if on]  # fmt: skip
            if others:
                problems.append(f"{pp} with {', '.join(others)} is not implemented")
            if self.model_size in PRESETS and self.model_shape().num_layers % self.pp:
                problems.append(f"{self.model_shape().num_layers} layers do not split into "
                                f"PIPELINE_MODEL_PARALLEL_SIZE={self.pp} equal stages")  # fmt: skip
        if self.cp > 1:
            cp = "CONTEXT_PARALLEL_SIZE>1"
            if self.tp > 1:
                problems.append(f"{cp} with TENSOR_MODEL_PARALLEL_SIZE>1 is not implemented")
            if self.compile:
                problems.append(f"{cp} with COMPILE=1 is not implemented (PyTorch's context parallelism "
                                "swaps the attention function at run time)")  # fmt: skip
            if self.seq_length % (2 * self.cp):
                problems.append(f"SEQ_LENGTH={self.seq_length} is not a multiple of 2 x {cp[:-2]} "
                                "(each rank holds a head and a tail chunk of every sequence)")  # fmt: skip
        if self.fp8 and self.tp > 1 and self.fp8_backend != "native":
            problems.append(
                f"FP8=1 with TENSOR_MODEL_PARALLEL_SIZE>1 runs with FP8_BACKEND=native only (not "
                f"{self.fp8_backend!r})"
            )
        if self.fp8 and self.precision == "fp32":
            problems.append("FP8=1 needs PRECISION=bf16 or auto")
        if not problems and self.model_size in PRESETS:
            problems += shape_problems(self.model_shape(), self.tp)
        if problems:
            raise ConfigError("; ".join(problems))

    @classmethod
    def from_env(cls, environ, config_vars=()) -> LlamaPretrainConfig:
        return from_env(cls, environ, config_vars)

    # ---- derived values ----
    def check(self, world_size: int) -> Parallelism:
        """The parallelism arithmetic: TP x PP x CP divides the world, and GBS = MBS x DP x grad-accum."""
        model_parallel = self.tp * self.pp * self.cp
        if world_size % model_parallel:
            raise ConfigError(
                f"TENSOR_MODEL_PARALLEL_SIZE x PIPELINE_MODEL_PARALLEL_SIZE x CONTEXT_PARALLEL_SIZE = "
                f"{self.tp} x {self.pp} x {self.cp} = {model_parallel} does not divide the world size "
                f"{world_size} "
                f"(DGXNNODES x DGXNGPU)"
            )
        dp = world_size // model_parallel
        if self.global_batch_size % (self.micro_batch_size * dp):
            raise ConfigError(
                f"GBS={self.global_batch_size} is not a multiple of MBS x data-parallel size = "
                f"{self.micro_batch_size} x {dp} (world {world_size} / TP x PP x CP {model_parallel})"
            )
        accum = self.global_batch_size // (self.micro_batch_size * dp)
        if accum < self.pp:
            raise ConfigError(
                f"PIPELINE_MODEL_PARALLEL_SIZE={self.pp} needs at least as many micro-batches per step: "
                f"GBS / (MBS x data-parallel size) = {accum}"
            )
        return Parallelism(world_size, self.tp, self.pp, self.cp, dp, accum)

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

    def end_lr(self) -> float:
        return END_LR_FACTOR * self.max_lr

    def decay_steps(self) -> int:
        return self.max_steps - self.warmup_steps

    def sample_limit(self) -> int:
        """Samples after which a run that has not reached the target ends `aborted`."""
        return self.max_samples_termination or self.max_steps * self.global_batch_size

    def max_train_steps(self) -> int:
        return min(self.max_steps, math.ceil(self.sample_limit() / self.global_batch_size))

    def eval_steps(self) -> tuple[int, int]:
        """(first, every): optimizer steps of the first evaluation and between evaluations, as AMD's
        val_check_interval = ceil(EVAL_EVERY / GBS)."""
        every = math.ceil(self.eval_every / self.global_batch_size)
        first = math.ceil(self.start_eval_at / self.global_batch_size) if self.start_eval_at else every
        return first, every

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
        }


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
