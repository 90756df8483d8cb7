"""The vendor vocabulary: every variable that AMD's and NVIDIA's published MLPerf Training implementations of
BERT, Llama 2 70B LoRA and Llama 3.1 8B set or read (their `config_*.sh`, the `config_common*.sh` files those
source, their `run_and_time.sh` / `run.sub` / `run_with_docker.sh`, and the NeMo yaml their trainers read the
environment through; MLCommons' training_results v4.0 to v5.1), and what this toolkit does with each.

A row is one of:
- honored: mapped to our variable(s), converted where the vendor's unit or meaning differs (NVIDIA's `MINIBS`
  is sequences per data-parallel rank, ours per GPU; their 8B `VAL_CHECK_INTERVAL` counts steps, our
  `EVAL_EVERY` samples), and recorded with what it set;
- library: read from the environment by a library underneath (NCCL, Transformer Engine, PyTorch, the ROCm and
  CUDA runtimes): it reaches the container as set, as every config variable does;
- not applicable: nothing here reads it (a NeMo checkpoint flag, a Lustre preload, a CUDA-graph switch we do
  not have ...); the reason is printed once (the preflight, each run's log) and recorded in the run's
  effective config.
A variable of our own (a config field or one of its aliases) needs no row. A name that is neither ours nor in
this table nor a library's prefix is a typo (`training.common.config.from_env`).

Standard library only: the launchers run `python3 -m training.common.vendor_vars launcher` on the host, where
the image's packages are not installed, to find the benchmark and scale of a vendor config that does not name
them.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

HONORED, LIBRARY, NOT_APPLICABLE = "honored", "library", "not applicable"
ALL = ("bert", "llama2_70b_lora", "llama31_8b")  # the rows' default; flux1's rows are their own block
LLAMA = ("llama2_70b_lora", "llama31_8b")
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "", "null", "none")


class VendorError(ValueError):
    """A vendor variable whose value cannot be honored here (a feature not implemented, a unit that does not
    convert); the message names it and what to do."""


@dataclass(frozen=True)
class VendorVar:
    name: str
    kind: str  # HONORED | LIBRARY | NOT_APPLICABLE
    why: str  # honored: what it maps to; library: which library reads it; not applicable: why not
    benchmarks: tuple[str, ...] = ALL
    # honored: our variables (name -> raw value) from its value and the environment so far
    to: Callable[[str, Mapping[str, str]], dict[str, str]] | None = None


def _flag(value: str, name: str) -> bool:
    low = value.strip().lower()
    if low in TRUE:
        return True
    if low in FALSE:
        return False
    raise VendorError(f"{name}={value!r}: expected True/False or 1/0")


def _int(env: Mapping[str, str], *names: str, default: int = 1) -> int:
    """The first of `names` set in `env`, as a whole number (default when none is)."""
    for name in names:
        raw = env.get(name, "").strip()
        if raw:
            try:
                value = float(raw)
            except ValueError:
                raise VendorError(f"{name}={raw!r}: expected a whole number") from None
            if not value.is_integer():
                raise VendorError(f"{name}={raw!r}: expected a whole number")
            return int(value)
    return default


# The names each of our variables that the conversions read is given by (ours first, then its aliases).
NODES = ("DGXNNODES", "NNODES")
GPUS = ("DGXNGPU", "GPUS_PER_NODE")
TP_8B = ("TENSOR_MODEL_PARALLEL_SIZE", "TP", "TENSOR_MODEL_PARALLEL")
PP_8B = ("PIPELINE_MODEL_PARALLEL_SIZE", "PP", "PIPELINE_MODEL_PARALLEL")
CP_8B = ("CONTEXT_PARALLEL_SIZE", "CP", "CONTEXT_PARALLEL")


def data_parallel(env: Mapping[str, str], tp: Iterable[str], pp: Iterable[str], cp: Iterable[str]) -> int:
    """World size / (TP x PP x CP), as NeMo counts the data-parallel ranks."""
    world = _int(env, *NODES) * _int(env, *GPUS)
    split = _int(env, *tp) * _int(env, *pp) * _int(env, *cp)
    if split <= 0 or world % split:
        raise VendorError(
            f"TP x PP x CP = {split} does not divide the world size {world} (DGXNNODES x DGXNGPU)"
        )
    return world // split


def _same(name: str) -> Callable[[str, Mapping[str, str]], dict[str, str]]:
    return lambda value, env: {name: value}


def _minibs_8b(value: str, env: Mapping[str, str]) -> dict[str, str]:
    """NVIDIA's 8B: MINIBS sequences per data-parallel rank, GBS = MINIBS x world / (TP x PP x CP)."""
    minibs = _int({"MINIBS": value}, "MINIBS")
    return {"GBS": str(minibs * data_parallel(env, TP_8B, PP_8B, CP_8B))}


def _val_check_8b(value: str, env: Mapping[str, str]) -> dict[str, str]:
    """NVIDIA's 8B: VAL_CHECK_INTERVAL optimizer steps between evaluations; ours EVAL_EVERY samples."""
    steps = _int({"VAL_CHECK_INTERVAL": value}, "VAL_CHECK_INTERVAL")
    gbs = _int(env, "GBS", "GLOBAL_BATCH_SIZE", default=0)
    if gbs <= 0:
        raise VendorError(
            f"VAL_CHECK_INTERVAL={value} (steps, NVIDIA's 8B) needs the global batch: set GBS or MINIBS"
        )
    return {"EVAL_EVERY": str(steps * gbs)}


def _checkpoint_granularity(value: str, env: Mapping[str, str]) -> dict[str, str]:
    """NeMo's activations_checkpoint_granularity: full recomputes whole blocks (ours), selective only the core
    attention, which ours does not."""
    low = value.strip().lower()
    if low in FALSE:
        return {}
    if low == "full":
        return {"ACTIVATION_CHECKPOINTING": "1"}
    raise VendorError(
        f"ACG={value!r}: only 'full' (whole blocks recomputed: ACTIVATION_CHECKPOINTING=1) is "
        "implemented here; selective (core attention only) is not: set ACG=full or unset it"
    )


def _checkpoint_method(value: str, env: Mapping[str, str]) -> dict[str, str]:
    """NeMo's activations_checkpoint_method: block recomputes the first ACL blocks (ours, ACL as is); uniform
    recomputes every block in groups of ACL, which ours does one block at a time (ACL unset)."""
    low = value.strip().lower()
    if low in FALSE or low == "block":
        return {}
    if low == "uniform":
        if env.get("ACL", "").strip().lower() not in FALSE:
            raise VendorError(
                f"ACM=uniform with ACL={env['ACL']}: NeMo recomputes every block in groups of "
                "ACL; here every block is recomputed with ACL unset (ACL means the first ACL "
                "blocks, NeMo's ACM=block): unset ACL"
            )
        return {}
    raise VendorError(f"ACM={value!r}: expected block or uniform")


def _hybrid(value: str, env: Mapping[str, str]) -> dict[str, str]:
    if not _flag(value, "FP8_HYBRID"):
        raise VendorError(
            "FP8_HYBRID=False (e4m3 gradients too) is not implemented: FP8 here is the HYBRID "
            "format (e4m3 forward, e5m2 gradients)"
        )
    return {}


def _fp8_params(value: str, env: Mapping[str, str]) -> dict[str, str]:
    """AMD's 8B: FP8 parameters exist only in an FP8 run, and its train.py trains FP8 (HYBRID) whatever the
    config says, so a config that sets FP8_PARAMS=1 trains FP8 here too rather than bf16."""
    if _flag(value, "FP8_PARAMS"):
        return {"PRECISION": "fp8", "FP8_PARAM_GATHER": "1"}
    return {"FP8_PARAM_GATHER": "0"}


def _primus_min_lr(value: str, env: Mapping[str, str]) -> dict[str, str]:
    """AMD's Primus 8B: the cosine's floor, which the rules fix at a tenth of the peak (our END_LR_FACTOR)."""
    floor = _number(value, "PRIMUS_MIN_LR")
    peak = _number(env.get("MAX_LR") or env.get("LR") or env.get("PRIMUS_LR") or "", "PRIMUS_LR")
    if not math.isclose(floor, 0.1 * peak, rel_tol=1e-9):
        raise VendorError(
            f"PRIMUS_MIN_LR={value}: the 8B's cosine ends at a tenth of its peak here, as the rules fix "
            f"it: set PRIMUS_MIN_LR to PRIMUS_LR/10 = {0.1 * peak:g}"
        )
    return {}


def _primus_decay(value: str, env: Mapping[str, str]) -> dict[str, str]:
    """AMD's Primus 8B: the cosine's length, which is MAX_STEPS - WARMUP_STEPS here (the rules' schedule)."""
    steps, warmup = _int(env, "MAX_STEPS", default=0), _int(env, "WARMUP_STEPS", default=0)
    if _int({"PRIMUS_LR_DECAY_ITERS": value}, "PRIMUS_LR_DECAY_ITERS") != steps - warmup:
        raise VendorError(
            f"PRIMUS_LR_DECAY_ITERS={value}: the 8B's cosine runs MAX_STEPS - WARMUP_STEPS = "
            f"{steps - warmup} steps here, as the rules fix it; set it to that"
        )
    return {}


def _steps_to_samples(name: str, ours: str) -> Callable[[str, Mapping[str, str]], dict[str, str]]:
    """A count of optimizer steps (or batches) of the global batch, as our count of samples."""

    def convert(value: str, env: Mapping[str, str]) -> dict[str, str]:
        steps = _int({name: value}, name)
        gbs = _int(env, "GBS", "GLOBAL_BATCH_SIZE", default=0)
        if gbs <= 0:
            raise VendorError(f"{name}={value} (steps) needs the global batch: set PRIMUS_GLOBAL_BATCH_SIZE")
        return {ours: str(steps * gbs)}

    return convert


def _hybrid_recipe(value: str, env: Mapping[str, str]) -> dict[str, str]:
    if value.strip().lower() != "hybrid":
        raise VendorError(f"PRIMUS_FP8_RECIPE={value!r}: FP8 here is the hybrid format only")
    return {}


def _one(value: str, env: Mapping[str, str]) -> dict[str, str]:
    if _int({"EXPERT_PARALLELISM": value}, "EXPERT_PARALLELISM") != 1:
        raise VendorError(f"expert parallelism {value}: these Llama models are dense (no experts); set 1")
    return {}


def _number(raw: str, name: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise VendorError(f"{name}={raw!r}: expected a number") from None


def _honored(name: str, why: str, to, benchmarks: tuple[str, ...] = ALL) -> list[VendorVar]:
    return [VendorVar(name, HONORED, why, benchmarks, to)]


def _na(why: str, names: str, benchmarks: tuple[str, ...] = ALL) -> list[VendorVar]:
    return [VendorVar(name, NOT_APPLICABLE, why, benchmarks) for name in names.split()]


def _library(why: str, names: str, benchmarks: tuple[str, ...] = ALL) -> list[VendorVar]:
    return [VendorVar(name, LIBRARY, why, benchmarks) for name in names.split()]


TE = "Transformer Engine's; read by it where FP8_BACKEND=te runs"
TE_ONLY = "a switch of NeMo's Transformer Engine layers; this toolkit's layers are its own"
NEMO = "a NeMo / Megatron trainer setting; this toolkit's trainer has no such switch"
NVIDIA_CLUSTER = "NVIDIA's cluster tooling (SLURM wrappers, telemetry, profiling, power, mount checks)"
AMD_ROCM = "a switch of AMD's ROCm builds of NeMo and Transformer Engine; this toolkit's kernels are its own"
CUDA_GRAPHS = "a CUDA-graph switch of NeMo/Megatron; CUDA graphs here: BERT's COMPILE_MODE=reduce-overhead"
OVERLAP = "tensor-parallel communication overlap (Transformer Engine userbuffers); not implemented here"
CHECKPOINTS = (
    "a NeMo checkpoint setting (resume, save, convert); runs here start from the Hugging Face weights"
)
PROFILING = "a profiling or debugging switch of the vendor's trainer"

ROWS: list[VendorVar] = [
    # ---- scale and layout ----
    *_honored("NNODES", "AMD's 8B name for DGXNNODES", _same("DGXNNODES")),
    *_honored("GPUS_PER_NODE", "AMD's 8B name for DGXNGPU", _same("DGXNGPU")),
    *_honored(
        "MINIBS",
        "NVIDIA's 8B: sequences per data-parallel rank; GBS = MINIBS x world / (TP x PP x CP)",
        _minibs_8b,
        ("llama31_8b",),
    ),
    *_honored(
        "VAL_CHECK_INTERVAL",
        "NVIDIA's 8B: optimizer steps between evaluations; EVAL_EVERY = VAL_CHECK_INTERVAL x GBS samples",
        _val_check_8b,
        ("llama31_8b",),
    ),
    *_honored(
        "OPT_LR_DECAY_STEPS", "NVIDIA's 8B cosine horizon: our MAX_STEPS", _same("MAX_STEPS"), ("llama31_8b",)
    ),
    *_na("NVIDIA's 8B data-parallel count override; ours is world / (TP x PP x CP)", "NPAR", ("llama31_8b",)),
    *_na(
        "Megatron's sequence parallelism (with TP); the tensor-parallel blocks here shard by DTensor plans",
        "SP SEQ_PARALLEL",
        LLAMA,
    ),
    *_na(
        "Megatron's interleaved (virtual) pipeline stages and asymmetric first/last stages; the pipeline "
        "here is PyTorch's 1F1B over equal stages",
        "INTERLEAVED_PIPELINE VP ASYM_PP_EMBED ASYM_PP_LOSS",
        ("llama31_8b",),
    ),
    *_na("NeMo's rank order of TP, PP and DP; ours is fixed (DP outermost)", "TP_PP_DP_MAPPING", LLAMA),
    *_na(
        "NeMo's context-parallel settings of its evaluation and its communication type; ours: ring attention "
        "over CONTEXT_PARALLEL_SIZE",
        "CP_EVAL CP_COMM_TYPE HAS_CP_CONFIG",
        LLAMA,
    ),
    *_na(
        "an expert-parallel size (mixture of experts); the Llama models here are dense",
        "EXPERT_PARALLEL",
        LLAMA,
    ),
    *_na("NeMo's FSDP switch; the data parallelism here is always FSDP2", "FSDP", LLAMA),
    # ---- recomputation ----
    *_honored(
        "ACG",
        "NeMo's activations_checkpoint_granularity: full is ACTIVATION_CHECKPOINTING=1",
        _checkpoint_granularity,
        ("llama2_70b_lora",),
    ),
    *_honored(
        "ACM",
        "NeMo's activations_checkpoint_method: block is our ACL (the first ACL blocks)",
        _checkpoint_method,
        ("llama2_70b_lora",),
    ),
    *_honored(
        "ACT_CKPT_GRANULARITY",
        "NVIDIA's 8B activations_checkpoint_granularity: full is ACTIVATION_CHECKPOINTING=1",
        _checkpoint_granularity,
        ("llama31_8b",),
    ),
    *_na(
        "NVIDIA's 8B recompute method and block count: the 8B here recomputes every block or none "
        "(ACTIVATION_CHECKPOINTING)",
        "ACT_CKPT_METHOD ACT_CKPT_NUM_LAYERS",
        ("llama31_8b",),
    ),
    *_na(
        "Megatron's recompute settings (granularity, method, modules); ours: ACTIVATION_CHECKPOINTING, ACL, "
        "AC_KEEP_ATTENTION",
        "RECOMPUTE_GRANULARITY RECOMPUTE_METHOD RECOMPUTE_MODULES RECOMPUTE_NUM_LAYERS "
        "DROPOUT_RECOMPUTE DISTRIBUTE_SAVED_ACTIVATIONS",
        LLAMA,
    ),
    *_na(
        "NeMo's activation offloading to the CPU, on any number of GPUs; ours is one GPU's "
        "ACTIVATION_OFFLOAD_LAYERS",
        "CPU_OFFLOADING CPU_OFFLOADING_DOUBLE_BUFFERING CPU_OFFLOADING_NUM_LAYERS",
        LLAMA,
    ),
    # ---- precision ----
    *_honored(
        "FP8_HYBRID",
        "True: the HYBRID format FP8 runs in here (e4m3 forward, e5m2 gradients)",
        _hybrid,
        LLAMA,
    ),
    *_honored(
        "FP8_PARAMS",
        "AMD's 8B FP8 parameters: 1 is PRECISION=fp8 (its trainer always trains FP8) with the FP8 linears' "
        "weights all-gathered in FP8 (FP8_PARAM_GATHER=1); the master weights stay in higher precision",
        _fp8_params,
        ("llama31_8b",),
    ),
    *_na(
        "NVIDIA's FP4 parameters (weights kept in NVFP4 between steps) and their all-gather in 4 bits; "
        "here the 4-bit GEMMs quantize each step's gathered bf16 weight (training.fp4)",
        "FP4_PARAM FP4_PARAM_GATHER",
        LLAMA,
    ),
    *_na(
        "amaxes are not all-reduced across ranks here: native FP8 scales each rank by its own amaxes",
        "FP8_REDUCE_AMAX TP_ONLY_AMAX_RED",
        LLAMA,
    ),
    *_na(
        "native FP8 linears always keep their inputs in FP8 for the backward; FP8_MLP_ACTIVATIONS=1 keeps "
        "the SwiGLU's inputs in FP8 too, not set by these names (its loss parity is not measured on GPUs)",
        "FP8_ACTIVATION FP8_ACT",
        LLAMA,
    ),
    *_na(
        "Transformer Engine delayed-scaling settings that NeMo passes on (margin, interval, e4m3-only); ours "
        "are margin 0, every step, HYBRID",
        "FP8_E4M3 FP8_INTERVAL FP8_MARGIN",
        LLAMA,
    ),
    *_na(
        "NVIDIA's first and last blocks computed in bf16 in an FP8 or FP4 run (Megatron's "
        "first_last_layers_bf16, HPE's v6.0 LoRA FP4 configs); here every block's linears run the recipe "
        "(FP8, or FP4 until healed): not implemented",
        "FIRST_LAST_LAYERS_BF16 NUM_LAYERS_AT_START_IN_BF16 NUM_LAYERS_AT_END_IN_BF16",
        LLAMA,
    ),
    *_na(
        "NVIDIA's healing of CUDA graphs and of its warm-up (no CUDA graphs here; the warm-up's precision is "
        "WARMUP_RECIPE's)",
        "WARMUP_HEALING RESET_CG_AFTER_HEALING",
        LLAMA,
    ),
    *_na(
        "AMD's and NVIDIA's FP4 LoRA: the frozen base's linear weights quantized once before training, to "
        "4 bits for the GEMMs and to FP8 for the healing (NVIDIA's NVFP4Callback), to save the casts; "
        "here the 4-bit and FP8 linears quantize the bf16 base at each step, which gives the same 4-bit "
        "values every step (the base does not change); after healing the FP8 weight is scaled by its "
        "delayed-scaling amax, where NVIDIA's pre-quantized FP8 copy is cast at scale 1",
        "PRE_QUANTIZED_MODEL",
        ("llama2_70b_lora",),
    ),
    *_na(
        "where NVIDIA's pre-quantized FP8 copies of the base wait for the healing (GPU, not pinned host "
        "memory); nothing is pre-quantized here (PRE_QUANTIZED_MODEL)",
        "STORE_GPU",
        LLAMA,
    ),
    *_na(
        "Transformer Engine's recipe for its own FP8 attention (NVIDIA's FP4 configs: DelayedScaling for "
        "LoRA, Float8CurrentScaling for the 8B); FP8 attention here (FP8_DPA=1, the Llama models) is "
        "cuDNN's FP8 SDPA with Q, K, V and dO scaled by their own amax at each step, as "
        "Float8CurrentScaling does, and the backward's dS and FP8 gradients by a 4-step amax history",
        "NVTE_DPA_FP8_RECIPE NVTE_DPA_FP8_FORMAT NVTE_DPA_FP8DS_AMAX_ALGO NVTE_DPA_FP8DS_AMAX_HISTLEN "
        "NVTE_DPA_FP8DS_REDUCE_AMAX NVTE_DPA_FP8CS_O_in_F16",
    ),
    *_na(
        "NeMo's precision string; here PRECISION (auto, fp32, bf16, fp8) and FP8", "TRANSFORMER_ENGINE", LLAMA
    ),
    *_na(
        "the FP8 statistics reset after NeMo's warm-up; the native FP8 amaxes here are reset after ours",
        "RESET_FP8_STATS_AFTER_WARMUP",
        LLAMA,
    ),
    # ---- schedule, evaluation, data ----
    *_na(
        "the 8B's end learning rate is fixed by the rules at 0.1 x LR (MIN_LR is NVIDIA's 405B setting)",
        "MIN_LR",
        ("llama31_8b",),
    ),
    *_na(
        "NVIDIA's proxy GBS for the LR schedule of an 8B run (rules: the schedule is the GBS's own)",
        "PROXY_GBS MAX_STEPS_FOR_LR_SCHED",
        ("llama31_8b",),
    ),
    *_na(
        "the evaluation's micro-batch: evaluation here runs one row per GPU per forward",
        "VAL_MBS",
        ("llama2_70b_lora",),
    ),
    *_na(
        "the number of validation passes in NeMo's warm-up; ours runs one", "WARMUP_VALIDATION_STEPS", LLAMA
    ),
    *_na(
        "NeMo's synthetic-data warm-up switch; here WARMUP (LoRA) and SYNTHETIC_WARMUP_STEPS (8B)",
        "RUN_WARMUP_ON_SYNTH_DATA",
        LLAMA,
    ),
    *_na(
        "NeMo's loss on answer tokens only: the LoRA loss here is always on the scored (answer) tokens",
        "ANSWER_ONLY_LOSS",
        ("llama2_70b_lora",),
    ),
    *_na(
        "Lightning's epoch and batch limits; the run here ends at its target, MAX_STEPS or the sample limit",
        "MAX_EPOCHS LIMIT_TRAIN_BATCHES LIMIT_VAL_BATCHES LIMIT_TEST_BATCHES",
        LLAMA,
    ),
    *_na(
        "NeMo's evaluation switches (skip, extend after the target, pre-validate); evaluation here follows "
        "the rules' cadence",
        "SKIP_EVAL EXTEND_RUN_EVALS PRE_VALIDATE TRAIN_ONLY",
        LLAMA,
    ),
    *_na(
        "NeMo's data paths inside its container; here DATADIR (mounted at /data) and MODEL",
        "DATA_ROOT CKPT_ROOT",
        LLAMA,
    ),
    *_na(
        "NVIDIA's 8B data pipeline switches (legacy dataset, mocked data, index exchange); the 8B data here "
        "is megatron-core's GPTDataset over DATADIR",
        "LEGACY_DATASET MOCK_DATASET MOCK_TOKENIZER_VOCAB_SIZE "
        "CUSTOM_INPUT_PIPELINE EXCHANGE_INDICES_DISTRIBUTED OVERRIDE_ZERO_CONSUMED_SAMPLES INIT_GLOBAL_STEP",
        ("llama31_8b",),
    ),
    *_na(
        "NeMo's data-loader workers of its LoRA sets; the LoRA rows here are in memory",
        "NUM_TRAIN_DS_WORKERS NUM_TRAIN_VAL_WORKERS",
        ("llama2_70b_lora",),
    ),
    *_na(
        "NeMo's data-loader workers; the LoRA rows here are in memory (the 8B's are NUM_WORKERS)",
        "NUM_WORKERS",
        ("llama2_70b_lora",),
    ),
    *_na(
        "NVIDIA's BERT data mounts (run.sub binds them into its container); here DATADIR holds every part "
        "(TRAIN_DIR, EVAL_DIR override)",
        "DATADIR_PHASE2 DATADIR_PHASE2_PACKED EVALDIR CHECKPOINTDIR_PHASE1",
        ("bert",),
    ),
    # ---- checkpoints ----
    *_na(
        CHECKPOINTS,
        "LOAD_CKPT LOAD_CHECKPOINT USE_CKPT FROM_HF SAVE_CKPT CONTINUAL_CKPT START_STEPS "
        "USE_DIST_CHECKPOINTING DIST_CKPT_PARALLEL_LOAD CKPT_EVERY_VALIDATION CHECKPOINTS_DIR "
        "GLOBAL_TMP_CHECKPOINTS_DIR STORE_CKPTS_IN_LOGDIR",
        LLAMA,
    ),
    # ---- optimizer and communication ----
    *_na(
        "Megatron's distributed optimizer and its overlap settings; here FSDP2 shards the optimizer state "
        "(REDUCE_EACH_MICRO_BATCH, RESHARD_AFTER_FORWARD)",
        "USE_DIST_OPTIMIZER USE_DISTRIBUTED_OPTIMIZER "
        "OVERLAP_GRAD_REDUCE OVERLAP_PARAM_GATHER OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP "
        "OVERLAP_PARAM_GATHER_WITH_OPTIMIZER_STEP ALIGN_PARAM_GATHER BUCKET_SIZE "
        "MCORE_OPTIM_OVERLAP_PARAM_SYNC "
        "DDP_AVERAGE_IN_COLLECTIVE DDP_FP8_PARAM_GATHER DDP_OVERLAP_GRAD_REDUCE DDP_OVERLAP_PARAM_GATHER "
        "GRAD_ACCUM_FUSION DEFER_EMBEDDING_WGRAD_COMPUTE WGRAD_DEFERRAL_LIMIT OPTIM_LOCK_TIMEOUT "
        "ON_DEVICE_CLIP_GRAD",
        LLAMA,
    ),
    *_na(
        "pipeline point-to-point batching and overlap of Megatron; ours: PyTorch's pipeline schedule",
        "BATCH_P2P BATCH_P2P_COMM OVERLAP_P2P OVERLAP_P2P_COMM SYNC_BATCH_COMM",
        LLAMA,
    ),
    *_na(
        OVERLAP,
        "TP_COMM_OVERLAP MC_TP_OVERLAP_AG MC_TP_OVERLAP_RS MC_TP_OVERLAP_RS_DGRAD MC_TP_DISABLE_QKV "
        "UB_SKIPMC NCCL_UB",
        LLAMA,
    ),
    *_na(
        "NVIDIA's LoRA all-to-all of the adapters under context parallelism; LoRA here is FSDP2 only",
        "LORA_A2A",
        ("llama2_70b_lora",),
    ),
    *_na("NVIDIA's NCCL per-communicator tuning file (inside their image)", "NCCL_CFG_PATH", LLAMA),
    *_na(
        "SHARP in-network reductions, a cluster setting (NCCL_COLLNET_* and SBATCH_NETWORK reach NCCL and "
        "SLURM as set)",
        "SHARP USE_SHARP",
        LLAMA,
    ),
    # ---- kernels, fusions, CUDA graphs ----
    *_na(
        CUDA_GRAPHS,
        "FULL_CUDA_GRAPH MCORE_CUDA_GRAPH LAYER_CUDA_GRAPH CG_WEIGHT_CACHING CUDA_GRAPH_SCOPE",
        LLAMA,
    ),
    *_na(
        TE_ONLY,
        "USE_TE_OPS USE_TE_SWIGLU USE_TE_RNG_TRACKER FUSED_QKV_ROPE FUSED_SINGLE_QKV_ROPE "
        "CE_FUSION_IMPL CROSS_ENTROPY_LOSS_FUSION FUSED_SOFTMAX RMSNORM_CAST",
        LLAMA,
    ),
    *_na(
        "NVIDIA's dropout kernels for LoRA (Thunder, memory-saving); the LoRA kernel here is LORA_KERNEL",
        "NEMO_LORA_USE_THUNDER_DROPOUT NEMO_LORA_MEMORY_SAVING_DROPOUT",
        ("llama2_70b_lora",),
    ),
    *_na(AMD_ROCM, "USE_HIPBLASLT ENABLE_TRANSPOSE_CACHE PT_TENSOR_VALIDATION PROFILE_RPD", LLAMA),
    *_na(
        "NVIDIA's BERT trainer flags (fused kernels, unpadding, CUDA graphs, Transformer Engine); ours are "
        "COMPILE, COMPILE_MODE, ATTENTION, RESIDUAL_DTYPE",
        "EXTRA_PARAMS",
        ("bert",),
    ),
    *_na("NVIDIA's extra NeMo command-line overrides", "EXTRA_ARGS", LLAMA),
    *_na(
        "NVIDIA's BERT switch between apex and PyTorch DDP; BERT here always runs PyTorch DDP",
        "USE_DDP",
        ("bert",),
    ),
    *_na(
        "NVIDIA's BERT attention switch; ATTENTION=auto takes flash-attn where the image has it",
        "USE_FLASH_ATTENTION USE_FP16_MHA",
        ("bert",),
    ),
    *_na(
        "the GPU architecture NVIDIA's configs name for their kernels (gb200, b ...); ours detect it",
        "GPU_ARCH",
        LLAMA,
    ),
    *_na("the NGC PyTorch version AMD's config records (informational)", "NVIDIA_PYTORCH_VERSION", LLAMA),
    *_na(
        "a Python garbage-collection interval of NeMo's trainer",
        "GC_TRAIN GC_VALID NEMO_MANUAL_GC_IN_VALIDATION",
        LLAMA,
    ),
    *_na(
        "NVIDIA's FLOP count per sample for its throughput line; ours computes its own",
        "MODEL_TFLOP_PER_SAMPLE",
        LLAMA,
    ),
    *_na(
        "NeMo's logging (Hydra errors, progress bar, train-loss broadcast, intervals); the logs here are "
        "MLLOG lines and a loss line every LOG_FREQ steps",
        "HYDRA_FULL_ERROR POSSIBLE_USER_WARNINGS "
        "TQDM_DISABLE NEMO_LOG_TRAIN_LOSS LOG_EVERY_N_STEPS LOGGING_INTERVAL TRAINING_LOSS_LOG_FREQ "
        "TRAIN_LOG_LEVEL ENABLE_PROGRESS_BAR DISABLE_NEMO_LOGS LOG_METRICS CREATE_TENSORBOARD_LOGGER "
        "PRINT_CONFIG USE_DATETIME LOG_TRAIN_BARRIER ENABLE_TRAIN_BARRIER",
        LLAMA,
    ),
    *_na(
        "Hugging Face libraries' offline and tokenizer switches; the runs here read local safetensors and "
        "pre-tokenized data",
        "HF_HUB_OFFLINE TRANSFORMERS_OFFLINE TOKENIZERS_PARALLELISM",
        LLAMA,
    ),
    *_na(
        PROFILING,
        "PROFILE PROFILER PROFILE_START_STEP PROFILE_END_STEP PROFILE_RANKS PROF_ACTIVE_STEPS "
        "PROF_OUTPUT_PATH PROF_REPITIONS PROF_WARMUP_STEPS TORCHPROF_DEVICES TORCHPROF_MAXROWS "
        "TORCHPROF_OUTPUT "
        "TORCHPROF_OUTPUT_DIR TORCHPROF_VERBOSE MEMORY_PROFILE MEMORY_PROFILE_END_LOCATION "
        "MEMORY_PROFILE_FILENAME MEMORY_PROFILE_MAX_ENTRIES MEMORY_PROFILE_POSSIBLE_OOM "
        "MEMORY_PROFILE_RANK_0_ONLY MEMORY_PROFILE_START_LOCATION ENABLE_MEMORY_PROFILER "
        "ENABLE_MEMORY_PROFILE "
        "ENABLE_MEMORY_PROFILING ENABLE_PERF_DEBUG DEBUG_MEMORY DEBUGGING_CALLBACK STAT_CALLBACK_FNAME "
        "STATS_CALLBACK BREAKDOWN EPOCH_PROF NVTX_FLAG TIME_TAGS NSYSCMD NSYS_METRICS NSYS_PREFIX "
        "CHECK_FOR_NAN_IN_GRAD DETERMINISTIC_MODE FORCE_OOM_BEFORE_STOP ATTEMPT_CUDA_GDB_CORE_DUMP "
        "POSTPROCESS_CUDA_GDB_CORE_DUMP REMOVE_CUDA_GDB_CORE_DUMP CK_FUSED_ATTN_LOG_CONFIG UNITTEST "
        "ENABLE_RERUNS",
        ALL,
    ),
    # ---- the vendors' launchers ----
    *_na(
        "the minutes per run NVIDIA's and AMD's configs add up into WALLTIME; here WALLTIME (sbatch -t) and "
        "WALLTIME_RUNANDTIME (srun --time)",
        "WALLTIME_MINUTES WALLTIME_EXIT_MINUTES",
        ALL,
    ),
    *_na(
        "NVIDIA's CPU-binding inputs (bindpcie); torchrun here starts the ranks without CPU binding",
        "DGXSOCKETCORES DGXNSOCKET DGXHT BINDCMD ENABLE_CPU_BINDING ENABLE_CPU_EXCLUSIVE ENABLE_IB_BINDING "
        "SEGMENT",
        ALL,
    ),
    *_na("NVIDIA's Lustre preload of the data into the container", "CONTAINER_PRELOAD_LUSTRE", ALL),
    *_na(
        "power-measurement runs (clock settings, training after run_stop); not part of this toolkit",
        "MAXQ_CLK MINEDP_CLK SET_MAXQ_CLK SET_MINEDP_CLK SUSTAINED_TRAINING_TIME POWER_CAP POWERCMDDIR "
        "POWERLOGDIR GRACE_POWER_SCRIPT MLPERF_POWER_TRAIN_AFTER_RUN_STOP VBOOST_VALUE",
        ALL,
    ),
    *_na(
        NVIDIA_CLUSTER,
        "JET JET_CREATE TELEMETRY_SCRIPT VERIFY_MOUNT VERIFY_MOUNTS GET_MOUNT_INFO "
        "INIT_EXPECTED_MOUNTS MNT_TARFILE_PATH EXTRA_MOUNTS EXTRA_ASSETS DLSIM_REPORT_CONT API_LOGGING "
        "API_LOG_DIR APILOG_DIR ABSLOGDIR LOGGER MILESTONE_YML MLPERF_CLUSTER_NAME MLPERF_SYSTEM_NAME "
        "MLPERF_SCALE DGX_OTA_VERSION DGX_PRETTY_NAME DGX_SWBUILD_VERSION NVMLPERF_NSIGHT_LOCATION "
        "NCCL_TEST NCCL_TEST_SHARP NCCL_TEST_WALLTIME NCCL_LLM_TEST NCCL_LLM_TEST_WALLTIME "
        "COMM_GEMM_OVERLAP_TEST COMM_GEMM_OVERLAP_TEST_CLEANUP RUN_ONLY_NCCL RUN_ONLY_COMM_GEMM_OVLP "
        "HANG_MONITOR_TIMEOUT MEM_MONITOR SHARE_RERUNS SORTED_HOSTFILE SRUN_KILL_ON_BAD_EXIT "
        "MELLANOX_VISIBLE_DEVICES USE_IPOIB MULTI_NODE ENABLE_CUDART_FIX CONT_FILE SLOW_DATADIR "
        "USER_DROPCACHE WORK_DIR PRINT_CONFIG_ONLY FORCE_SUCCESS_STATUS",
        ALL,
    ),
    *_na(
        "NVIDIA's run.sub writes each run's index cache and results in folders of its own; here "
        "INDEX_CACHE_DIR (8B) and LOGDIR",
        "GLOBAL_TMP_NPY_INDEX_DIR CLEANUP_NPY_INDEX_DIR NEMO_RESULTS_IN_TMP NEMO_RESULTS_SUBDIR",
        ALL,
    ),
    *_na(
        "the time stamp the vendors' launchers name logs by; the logs here are <BENCHMARK>_<DGXSYSTEM>_<i>",
        "DATESTAMP",
        ALL,
    ),
    *_na(
        "NVIDIA's synthetic-data and throughput-only runs",
        "SYNTH_DATA USE_SYNTHETIC_DATA THROUGHPUT_RUN DISABLE_CG",
        ALL,
    ),
    *_na("NVIDIA's seed of the first run; here SEED, run k getting SEED + k - 1", "SEED_BASE", ALL),
    *_na(
        "AMD's 8B: the step time above which its trainer stops (a hang guard)",
        "STEP_TIME_ATOL",
        ("llama31_8b",),
    ),
    *_na("AMD's 8B run tag of its checkpoints", "TAG", ("llama31_8b",)),
    *_na("AMD's 8B: extra packages its launcher mounts", "DEPENDENCIES", ALL),
    *_na("AMD's 8B: a remote-storage switch of its launcher", "REMOTE", ("llama31_8b",)),
    *_na(
        "NVIDIA's BERT: the phase-1 checkpoint mount and cache of its eval set",
        "PYTORCH_PRETRAINED_BERT_CACHE",
        ("bert",),
    ),
    # ---- MLPerf v6.0: AMD's Primus and NVIDIA's NeMo 26.04 ----
    *_honored("PRIMUS_GLOBAL_BATCH_SIZE", "AMD's Primus 8B: our GBS", _same("GBS"), ("llama31_8b",)),
    *_honored("PRIMUS_MICRO_BATCH_SIZE", "AMD's Primus 8B: our MBS", _same("MBS"), ("llama31_8b",)),
    *_honored("PRIMUS_LR", "AMD's Primus 8B: our MAX_LR", _same("MAX_LR"), ("llama31_8b",)),
    *_honored(
        "PRIMUS_MIN_LR",
        "AMD's Primus 8B cosine floor: a tenth of the peak here, as the rules fix it",
        _primus_min_lr,
        ("llama31_8b",),
    ),
    *_honored("PRIMUS_TRAIN_ITERS", "AMD's Primus 8B: our MAX_STEPS", _same("MAX_STEPS"), ("llama31_8b",)),
    *_honored(
        "PRIMUS_LR_WARMUP_ITERS", "AMD's Primus 8B: our WARMUP_STEPS", _same("WARMUP_STEPS"), ("llama31_8b",)
    ),
    *_honored(
        "EVAL_SAMPLES_INTERVAL",
        "AMD's Primus 8B: samples between evaluations, our EVAL_EVERY",
        _same("EVAL_EVERY"),
        ("llama31_8b",),
    ),
    *_honored(
        "PRIMUS_EVAL_INTERVAL",
        "AMD's Primus 8B: optimizer steps between evaluations; EVAL_EVERY = PRIMUS_EVAL_INTERVAL x GBS",
        _steps_to_samples("PRIMUS_EVAL_INTERVAL", "EVAL_EVERY"),
        ("llama31_8b",),
    ),
    *_honored(
        "PRIMUS_EVAL_ITERS",
        "AMD's Primus 8B: evaluation batches; EVAL_SAMPLES = PRIMUS_EVAL_ITERS x GBS",
        _steps_to_samples("PRIMUS_EVAL_ITERS", "EVAL_SAMPLES"),
        ("llama31_8b",),
    ),
    *_honored(
        "PRIMUS_FP8_RECIPE",
        "AMD's Primus 8B FP8 recipe: hybrid is the format FP8 runs in here (e4m3 forward, e5m2 gradients)",
        _hybrid_recipe,
        ("llama31_8b",),
    ),
    *_honored(
        "PRIMUS_LR_DECAY_ITERS",
        "AMD's Primus 8B cosine horizon: MAX_STEPS - WARMUP_STEPS here, as the rules fix it",
        _primus_decay,
        ("llama31_8b",),
    ),
    *_honored(
        "TENSOR_PARALLEL_SIZE",
        "TTA's 8B name for the tensor-parallel size, our TP",
        _same("TP"),
        ("llama31_8b",),
    ),
    *_honored("TARGET_EVAL_LOSS", "AMD's Primus 8B: our TARGET", _same("TARGET"), ("llama31_8b",)),
    *_honored("MLLOG_TARGET_EVAL_LOSS", "AMD's Primus: our TARGET", _same("TARGET"), LLAMA),
    *_honored(
        "SYNTH_WARMUP_STEPS",
        "AMD's Primus: synthetic training steps before run_start; SYNTHETIC_WARMUP_STEPS (8B)",
        _same("SYNTHETIC_WARMUP_STEPS"),
        ("llama31_8b",),
    ),
    *_honored(
        "SYNTH_WARMUP_STEPS",
        "AMD's Primus: synthetic training steps before run_start; WARMUP_TRAIN_STEPS (LoRA)",
        _same("WARMUP_TRAIN_STEPS"),
        ("llama2_70b_lora",),
    ),
    *_honored(
        "MLLOG_SUBMISSION_ORG", "AMD's Primus: MLPERF_SUBMISSION_ORG", _same("MLPERF_SUBMISSION_ORG"), LLAMA
    ),
    *_honored(
        "MLLOG_SUBMISSION_PLATFORM",
        "AMD's Primus: MLPERF_SUBMISSION_PLATFORM",
        _same("MLPERF_SUBMISSION_PLATFORM"),
        LLAMA,
    ),
    *_honored(
        "MLLOG_SUBMISSION_BENCHMARK", "AMD's Primus: the benchmark (BENCHMARK)", _same("BENCHMARK"), LLAMA
    ),
    *_honored("MLLOG_TENSOR_PARALLELISM", "AMD's Primus: the TP it logs, our TP", _same("TP"), LLAMA),
    *_honored("MLLOG_PIPELINE_PARALLELISM", "AMD's Primus: the PP it logs, our PP", _same("PP"), LLAMA),
    *_honored("MLLOG_CONTEXT_PARALLELISM", "AMD's Primus: the CP it logs, our CP", _same("CP"), LLAMA),
    *_honored(
        "MLLOG_MICRO_BATCH_SIZE", "AMD's Primus: the micro-batch it logs, our MBS", _same("MBS"), LLAMA
    ),
    *_honored(
        "MLLOG_EXPERT_PARALLELISM", "AMD's Primus: expert parallelism, 1 for these dense models", _one, LLAMA
    ),
    *_na(
        "AMD's Primus disclosure values as the config wishes them; the log here says what the build ran, and "
        "the config file's own name",
        "MLLOG_CONFIG_FILENAME MLLOG_LOWEST_NUMERICAL_PRECISION_LINEAR",
        LLAMA,
    ),
    *_na(
        "AMD's Primus MLLOG switches (on, its output file, loss lines, division); runs here always log "
        "MLLOG, closed division, into their LOGDIR log",
        "ENABLE_MLLOG MLLOG_OUTPUT_FILE MLLOG_TRAIN_LOSS_LOG_FREQ MLLOG_SUBMISSION_DIVISION "
        "MLPERF_VERBOSE_LOGS",
        LLAMA,
    ),
    *_na(
        "AMD's Primus trainer (its install, experiment yaml and workspace names, logging, fused RoPE); the "
        "trainer here is this toolkit's",
        "PRIMUS_PATH PRIMUS_MLPERF EXP PRIMUS_LOG_LEVEL PRIMUS_APPLY_ROPE_FUSION "
        "MEGATRON_BRIDGE_LOGGING_LEVEL TEAM EXP_NAME",
        LLAMA,
    ),
    *_na(
        "AMD's Primus data folder inside its container; the data here is DATADIR (mounted at /data)",
        "DATA_PATH",
        LLAMA,
    ),
    *_na(
        "AMD's Primus packed LoRA files; the rows here are read from DATADIR as AMD prepares them",
        "PACKED_TRAIN_DATA_PATH PACKED_VAL_DATA_PATH PACKED_METADATA_PATH",
        ("llama2_70b_lora",),
    ),
    *_na(
        "AMD's Primus converted Megatron checkpoint; the base here is read from the Hugging Face safetensors "
        "in MODEL",
        "PRETRAINED_CHECKPOINT",
        ("llama2_70b_lora",),
    ),
    *_na("a node's rank for AMD's launcher; the launchers here set it (torchrun, SLURM)", "NODE_RANK", LLAMA),
    *_na(
        "AMD's Primus synthetic validation steps and cache emptying after its warm-up; the warm-up here runs "
        "its own validation pass and frees its memory",
        "SYNTH_WARMUP_VALID_STEPS SYNTH_WARMUP_EMPTY_CACHE",
        LLAMA,
    ),
    *_na(
        "Transformer Engine's log of its FP4 GEMM shapes; the 4-bit GEMMs here are training.fp4's",
        "NVTE_FP4_LOG_GEMM_SHAPES",
        LLAMA,
    ),
    *_na(
        "NeMo 26.04's SM counts for Transformer Engine's communication-overlapped GEMMs; " + OVERLAP,
        "FC1_DGRAD_SM FC1_WGRAD_SM QKV_DGRAD_SM QKV_WGRAD_SM",
        LLAMA,
    ),
    *_na(
        "NeMo 26.04's data module loading only the samples it needs; " + NEMO,
        "LOAD_MINIMAL_NUM_SAMPLES",
        LLAMA,
    ),
    *_na(
        "NVIDIA's submitter name and submission status for its packaging scripts; the logs here take "
        "MLPERF_SUBMISSION_ORG and log status onprem",
        "MLPERF_SUBMITTER MLPERF_STATUS",
        LLAMA,
    ),
    *_na(
        PROFILING,
        "ROCTRACER_LOG ROCTRACER_LOG_LEVEL TORCHPROF_PROFILE_MEMORY TORCHPROF_WITH_STACK "
        "TORCHPROF_RECORD_SHAPES TORCHPROF_WITH_FLOPS NSYS NSYS_OUT",
        LLAMA,
    ),
    *_na(
        "a partner's cluster launcher (account, partition, image, job folder, binding, retries, clocks, "
        "paths inside its job); the launchers here take DATADIR, LOGDIR, CONT and SLURM's own settings",
        "ACCOUNT PARTITION TIME MAX_RETRIES IMAGE JOB_DIR PREPROCESSED_PATH TOKENIZER_PATH TMP_NPY_INDEX "
        "IB_BIND CPU_EXCLUSIVE BASE_TIME MAX_GPU_CLK HOST USER",
        LLAMA,
    ),
    *_na(
        "HPE's API-logging harness (config_common_apilogs.sh: its precision, model name, framework and batch "
        "labels); the logs here are MLLOG lines",
        "APILOG_PRECISION APILOG_MODEL_NAME FRAMEWORK BATCHSIZE",
        ("llama2_70b_lora",),
    ),
    *_na(TE_ONLY, "USE_TE_OPTS", LLAMA),
    *_library(
        "NCCL and the CUDA libraries' search paths",
        "NCCL_IGNORE_COLLNET_MISMATCH NCCL_IB_HCA NCCL_SOCKET_IFNAME NCCL_IB_GID_INDEX NCCL_NET_GDR_LEVEL "
        "NCCL_ALGO NCCL_IGNORE_CPU_AFFINITY NCCL_IB_DISABLE NCCL_DEBUG CUDNN_PATH LD_LIBRARY_PATH",
        LLAMA,
    ),
    *_library(
        "AMD's AITER kernels (tuned GEMM tables, their logs), read by the ROCm images' Transformer Engine",
        "AITER_CONFIG_GEMM_A4W4 AITER_LOG_TUNED_CONFIG AITER_LOG_LEVEL AITER_LOG_MORE LOG_AITER_GEMMS",
        LLAMA,
    ),
    *_library("Transformer Engine's (ROCm): AITER's rotary embedding", "NVTE_USE_AITER_ROPE", LLAMA),
    *_library(
        "the ROCm runtime, RCCL/NCCL and PyTorch's allocator (PYTORCH_ALLOC_CONF is its current name)",
        "HSA_NO_SCRATCH_RECLAIM HSA_ENABLE_SDMA HSA_ENABLE_INTERRUPT HSA_TOOLS_LIB "
        "HSA_ENABLE_SDMA_OPTIMIZATIONS GPU_MAX_HW_QUEUES HIP_API_BLOCKING NCCL_CHECKS_DISABLE "
        "NCCL_P2P_LEVEL NCCL_SINGLE_RING_THRESHOLD NCCL_BUFFSIZE PYTORCH_ROC_ALLOC_CONF "
        "PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_ALLOC_CONF PYTHONPATH PYTHONWARNINGS",
        LLAMA,
    ),
    # ---- read by a library underneath ----
    *_library(
        "NCCL's (RCCL's on ROCm)",
        "NCCL_MIN_P2P_NCHANNELS NCCL_MIN_CTAS NCCL_MAX_CTAS "
        "NCCL_NCHANNELS_PER_NET_PEER NCCL_NVLS_ENABLE NCCL_GRAPH_REGISTER NCCL_LOCAL_REGISTER "
        "NCCL_MIN_NCHANNELS NCCL_P2P_NET_CHUNKSIZE NCCL_SHARP_GROUP_SIZE_THRESH NCCL_WORK_FIFO_DEPTH",
    ),
    *_library(
        TE,
        "NVTE_RS_STRIDED_ATOMIC NVTE_FP8_DPA_BWD NVTE_FUSED_ATTN NVTE_FUSED_ATTN_CK "
        "NVTE_FUSED_ATTN_AOTRITON NVTE_DEBUG NVTE_DEBUG_LEVEL NVTE_USE_HIPBLASLT "
        "NVTE_USE_CAST_TRANSPOSE_TRITON "
        "NVTE_USE_OPTIMIZED_HIPIFIED_CAST_TRANSPOSE NVTE_USE_RMSNORM_TRITON NVTE_CK_USES_BWD_V3 "
        "NVTE_CK_USES_FWD_V3 NVTE_CK_IS_V3_ATOMIC_FP32 NVTE_CK_V3_BF16_CVT NVTE_CK_V3_SPEC "
        "NVTE_LOG_CK_CONFIG NVTE_LOG_FUSED_ATTN_CONFIG NVTE_FLASH_ATTN NVTE_DP_AMAX_REDUCE_INTERVAL "
        "NVTE_ASYNC_AMAX_REDUCTION NVTE_FWD_LAYERNORM_SM_MARGIN NVTE_BWD_LAYERNORM_SM_MARGIN "
        "NVTE_NORM_FWD_USE_CUDNN NVTE_NORM_BWD_USE_CUDNN NVTE_TP_OVERLAP_TRAINING_ONLY "
        "NVTE_UB_ATOMIC_GEMM_RS_FC2 NVTE_UB_ATOMIC_GEMM_RS_PROJ NVTE_TORCH_COMPILE TE_UB_ATOMIC_GEMM_RS",
    ),
    *_library(
        "the CUDA / ROCm runtime's and its math libraries' (cuBLAS, cuDNN)",
        "CUDA_DEVICE_MAX_CONNECTIONS "
        "CUBLAS_FORCE_XMMA_KERNEL_INIT CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT "
        "CUDA_ENABLE_COREDUMP_ON_EXCEPTION "
        "CUDA_ENABLE_LIGHTWEIGHT_COREDUMP CUDA_COREDUMP_SHOW_PROGRESS HIP_FORCE_DEV_KERNARG",
    ),
    *_library(
        "PyTorch's",
        "TORCH_NCCL_AVOID_RECORD_STREAMS TORCH_NCCL_HIGH_PRIORITY TORCH_CPP_LOG_LEVEL "
        "TORCH_BLAS_PREFER_HIPBLASLT PYTORCH_CUDA_ALLOC_CONF",
    ),
    *_library("OpenMP's (torchrun sets 1 thread per rank unless given)", "OMP_NUM_THREADS"),
    *_library("UCX's (a transport of the cluster's MPI and NCCL plug-ins)", "UCX_TLS"),
    *_library("SLURM's (sbatch and srun read them)", "SLURM_NTASKS SBATCH_NETWORK"),
]

# ---- flux1 (AMD's v6.0 flux1 configs, their run scripts and conf/flux1_schnell.yaml) ----
FLUX = ("flux1",)


def _val_check_flux(value: str, env: Mapping[str, str]) -> dict[str, str]:
    """AMD's flux1 (NeMo's trainer.val_check_interval): optimizer steps between evaluations; ours
    EVAL_EVERY samples = VAL_CHECK_INTERVAL x BATCHSIZE (its global batch)."""
    steps = _int({"VAL_CHECK_INTERVAL": value}, "VAL_CHECK_INTERVAL")
    gbs = _int(env, "BATCHSIZE", "GBS", default=0)
    if gbs <= 0:
        raise VendorError(
            f"VAL_CHECK_INTERVAL={value} (steps, AMD's flux1) needs the global batch: set BATCHSIZE"
        )
    return {"EVAL_EVERY": str(steps * gbs)}


def _one_way(name: str, what: str) -> Callable[[str, Mapping[str, str]], dict[str, str]]:
    """A parallel size AMD's flux1 logs (MLLOG_*_PARALLELISM): 1 is the one layout here."""

    def to(value: str, env: Mapping[str, str]) -> dict[str, str]:
        if _int({name: value}, name) != 1:
            raise VendorError(
                f"{name}={value}: {what} is not built for flux1 here (data parallel only); set 1"
            )
        return {}

    return to


FLUX_ROWS: list[VendorVar] = [
    *_honored(
        "VAL_CHECK_INTERVAL",
        "AMD's flux1: steps between evaluations; EVAL_EVERY = it x BATCHSIZE",
        _val_check_flux,
        FLUX,
    ),
    *_honored(
        "LOG_EVERY_N_STEPS", "AMD's flux1 (NeMo's log_every_n_steps): our LOG_FREQ", _same("LOG_FREQ"), FLUX
    ),
    *[
        r
        for name, what in (
            ("MLLOG_TENSOR_PARALLELISM", "tensor parallelism"),
            ("MLLOG_PIPELINE_PARALLELISM", "pipeline parallelism"),
            ("MLLOG_CONTEXT_PARALLELISM", "context parallelism"),
        )
        for r in _honored(name, f"AMD's flux1 {what} size (logged); 1 here", _one_way(name, what), FLUX)
    ],
    *_na(
        "AMD's flux1 Hydra config groups and extra overrides of its NeMo trainer; this toolkit's trainer "
        "reads its settings from the config's variables",
        "MODEL DATA EXTRA_ARGS",
        FLUX,
    ),
    *_na(
        "AMD's compile strategy (which regions of its NeMo DiT torch.compile takes); COMPILE_DIT=1 here "
        "compiles each double and single block",
        "COMPILE_DIT_STRATEGY",
        FLUX,
    ),
    *_na(
        "Megatron's distributed optimizer, sharding strategy, custom FSDP, buckets and overlap of its "
        "DDP; the data parallelism here is FSDP2, which shards the optimizer state and overlaps its "
        "collectives, reducing gradients in fp32",
        "USE_DISTRIBUTED_OPTIMIZER SHARDING_STRATEGY USE_CUSTOM_FSDP BUCKET_SIZE GRAD_REDUCE_IN_FP32 "
        "OVERLAP_PARAM_GATHER OVERLAP_GRAD_REDUCE DDP_AVERAGE_IN_COLLECTIVE FSDP SEGMENT",
        FLUX,
    ),
    *_na(
        "NeMo's LR hold (WarmupHoldPolicyScheduler): the LR here stays constant after the warm-up, as the "
        "reference's and AMD's (whose default hold never ends)",
        "HOLD_STEPS",
        FLUX,
    ),
    *_na(
        "AMD's untimed warm-up steps of its NeMo trainer (compilation, FP8 statistics); the runs here "
        "compile inside the timed run",
        "WARMUP_ENABLED WARMUP_TRAIN_STEPS WARMUP_VALIDATION_STEPS RESET_FP8_STATS_AFTER_WARMUP",
        FLUX,
    ),
    *_na(CUDA_GRAPHS, "CUDA_GRAPH_IMPL", FLUX),
    *_na(
        "NeMo's CPU offloading of weights and activations; not implemented here",
        "CPU_OFFLOADING CPU_OFFLOADING_ACTIVATIONS",
        FLUX,
    ),
    *_na(PROFILING, "DISABLE_PRINT CHECK_FOR_NAN_IN_GRAD CK_FUSED_ATTN_LOG_CONFIG", FLUX),
    *_na(TE_ONLY, "USE_TE_SWIGLU FUSED_SOFTMAX RMSNORM_CAST", FLUX),
    *_na(AMD_ROCM, "USE_HIPBLASLT ENABLE_TRANSPOSE_CACHE", FLUX),
    *_na(
        TE,
        "NVTE_RS_STRIDED_ATOMIC NVTE_FP8_DPA_BWD NVTE_FUSED_ATTN NVTE_FUSED_ATTN_CK NVTE_FUSED_ATTN_AOTRITON "
        "NVTE_DEBUG NVTE_DEBUG_LEVEL NVTE_USE_HIPBLASLT NVTE_USE_CAST_TRANSPOSE_TRITON NVTE_CK_USES_BWD_V3 "
        "NVTE_CK_USES_FWD_V3 NVTE_CK_IS_V3_ATOMIC_FP32 NVTE_LOG_CK_CONFIG NVTE_LOG_FUSED_ATTN_CONFIG",
        FLUX,
    ),
    *_library("PyTorch's", "TORCH_BLAS_PREFER_HIPBLASLT", FLUX),
    *_library("the ROCm runtime's", "HSA_NO_SCRATCH_RECLAIM", FLUX),
    *_library("RCCL's", "RCCL_ENABLE_MULTI_STREAM RCCL_STREAM_PRIORITY", FLUX),
    *_library(
        "NCCL's (RCCL's)",
        "NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_IB_GID_INDEX NCCL_PXN_DISABLE NCCL_DEBUG",
        FLUX,
    ),
    *_library("gloo's", "GLOO_SOCKET_IFNAME", FLUX),
]
ROWS += FLUX_ROWS
# ---- end of flux1 ----

# One row a name (and benchmark): checked by the tests.
TABLE: dict[str, list[VendorVar]] = {}
for _row in ROWS:
    TABLE.setdefault(_row.name, []).append(_row)


def row(name: str, benchmark: str | None) -> VendorVar | None:
    """The row of `name` for `benchmark` (None: the first row of that name), or None."""
    for candidate in TABLE.get(name, ()):
        if benchmark is None or benchmark in candidate.benchmarks:
            return candidate
    return None


def names(benchmark: str | None) -> set[str]:
    """Every vendor name this table knows for `benchmark` (None: for any)."""
    return {r.name for r in ROWS if benchmark is None or benchmark in r.benchmarks}


@dataclass
class Translation:
    environ: dict[str, str]  # the environment, with our variables set from the vendor names
    honored: dict[str, str]  # vendor NAME=value -> what it set here ("DGXNNODES=1"), or "" (nothing to set)
    not_applicable: dict[str, str]  # NAME -> why (the names the config exported)
    problems: list[str]

    def record(self) -> dict[str, dict[str, str]]:
        """What the effective config records: the vendor names honored and those not applicable here."""
        return {"honored": dict(self.honored), "not_applicable": dict(self.not_applicable)}


def _agree(a: str, b: str) -> bool:
    """Two raw values of one setting are the same: equal, equal numbers, or the same truth value."""
    if a.strip() == b.strip():
        return True
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-12)
    except ValueError:
        low = {a.strip().lower(), b.strip().lower()}
        return low <= set(TRUE) or low <= set(FALSE)


def translate(
    environ: Mapping[str, str], benchmark: str | None, config_vars: Iterable[str] = ()
) -> Translation:
    """Our variables from the vendor names set in `environ` (the honored rows of `benchmark`, in table order,
    each seeing what the rows before it set), and the not-applicable names among `config_vars` (the names the
    config exported). A vendor name and our own variable both set must agree; a value that cannot be honored
    is a problem naming it."""
    env = {k: v for k, v in environ.items()}
    honored, problems = {}, []
    for r in ROWS:
        if r.kind != HONORED or (benchmark is not None and benchmark not in r.benchmarks):
            continue
        value = environ.get(r.name, "")
        if value.strip() == "":
            continue
        try:
            derived = r.to(value, env)
        except VendorError as err:
            problems.append(str(err))
            continue
        for ours, new in derived.items():
            given = environ.get(ours, "").strip()
            if given and not _agree(given, new):
                problems.append(
                    f"{r.name}={value} ({r.why}) gives {ours}={new}, but {ours}={given} is set too"
                )
            elif not given:
                env[ours] = new
        honored[f"{r.name}={value}"] = ", ".join(f"{k}={v}" for k, v in derived.items())
    not_applicable = {}
    for name in config_vars:
        r = row(name, benchmark)
        if r is not None and r.kind == NOT_APPLICABLE:
            not_applicable[name] = r.why
    return Translation(env, honored, not_applicable, problems)


def describe(record: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Lines for a run's output from a `Translation.record()`: the vendor names honored (what each set) and
    those not applicable here, with why."""
    lines = []
    if record.get("honored"):
        done = "; ".join(f"{k} -> {v}" if v else f"{k} (as here)" for k, v in record["honored"].items())
        lines.append(f"vendor names honored: {done}")
    if record.get("not_applicable"):
        lines.append(
            "vendor names not applicable here (nothing of this toolkit reads them; passed on as set): "
            + "; ".join(f"{k}: {v}" for k, v in record["not_applicable"].items())
        )
    return lines


# ---- which benchmark a vendor config is (for a config that does not export BENCHMARK) ----

# Names that only one benchmark's configs use (AMD's, NVIDIA's and ours): a config that exports any of them
# and of no other benchmark's is that benchmark's.
SIGNATURES = {
    "bert": frozenset(
        "OPT_LAMB_BETA_1 OPT_LAMB_BETA_2 EVAL_ITER_SAMPLES EVAL_ITER_START_SAMPLES "
        "PHASE PACKING_FACTOR TARGET_MLM_ACCURACY WARMUP_PROPORTION START_WARMUP_STEP "
        "WEIGHT_DECAY_RATE INIT_LOSS_SCALE".split()
    ),
    "llama2_70b_lora": frozenset(
        "LORA_DIM LORA_RANK LORA_ALPHA LORA_DROPOUT LORA_A2A SKIP_EVALS MAX_SEQLEN VAL_MBS".split()
    ),
    "llama31_8b": frozenset(
        "GBS MAX_LR SIZE MODEL_SIZE EVAL_EVERY START_EVAL_AT TARGET_LOG_PPL VAL_SAMPLES "
        "EVAL_SAMPLES GLOBAL_BATCH_SIZE OPT_LR_DECAY_STEPS".split()
    ),
    "flux1": frozenset("COMPILE_DIT COMPILE_DIT_STRATEGY CPU_OFFLOADING_ACTIVATIONS LEARNING_RATE".split()),
}


def guess_benchmark(exported: Iterable[str]) -> tuple[str | None, str]:
    """(the benchmark whose names a config exports, why) or (None, why not)."""
    exported = set(exported)
    found = {name: sorted(exported & sig) for name, sig in SIGNATURES.items() if exported & sig}
    if len(found) == 1:
        ((name, seen),) = found.items()
        return name, f"its names {' '.join(seen[:4])} are {name}'s"
    if not found:
        return None, "none of its names is one benchmark's own"
    clash = "; ".join(f"{name}: {' '.join(seen[:3])}" for name, seen in found.items())
    return None, f"it exports names of several benchmarks ({clash})"


def launcher_values(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """What the launchers need and a vendor config may not export: BENCHMARK (from the names in CONFIG_VARS),
    DGXNNODES and DGXNGPU (from AMD's NNODES and GPUS_PER_NODE). Returns (values to set, problems)."""
    out, problems = {}, []
    exported = environ.get("CONFIG_VARS", "").split()
    if not environ.get("BENCHMARK") and environ.get("MLLOG_SUBMISSION_BENCHMARK") in ALL:
        out["BENCHMARK"] = environ["MLLOG_SUBMISSION_BENCHMARK"]
        print(
            f"BENCHMARK={out['BENCHMARK']}: from MLLOG_SUBMISSION_BENCHMARK, the config's name for it",
            file=sys.stderr,
        )
    elif not environ.get("BENCHMARK"):
        bench, why = guess_benchmark(exported)
        if bench is None:
            choices = " | ".join(SIGNATURES)
            problems.append(
                f"the config does not export BENCHMARK, and which benchmark it is cannot be told: "
                f"{why}; export BENCHMARK={choices}"
            )
        else:
            out["BENCHMARK"] = bench
            print(f"BENCHMARK={bench}: the config does not export it; {why}", file=sys.stderr)
    for ours, vendor in (("DGXNNODES", "NNODES"), ("DGXNGPU", "GPUS_PER_NODE")):
        if not environ.get(ours) and environ.get(vendor):
            out[ours] = environ[vendor]
            print(f"{ours}={environ[vendor]}: from {vendor}, the config's name for it", file=sys.stderr)
    return out, problems


def main(argv: list[str] | None = None) -> int:
    """`python -m training.common.vendor_vars launcher`: NAME=VALUE lines for the launchers (launcher_values);
    `python -m training.common.vendor_vars [BENCHMARK]`: the table."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["launcher"]:
        values, problems = launcher_values(os.environ)
        for problem in problems:
            print(f"vendor_vars: {problem}", file=sys.stderr)
        for name, value in values.items():
            print(f"{name}={value}")
        return 2 if problems else 0
    if argv and argv[0] not in (*ALL, *FLUX):
        print(
            f"usage: python -m training.common.vendor_vars [launcher | {' | '.join((*ALL, *FLUX))}]",
            file=sys.stderr,
        )
        return 2
    bench = argv[0] if argv else None
    for r in ROWS:
        if bench is None or bench in r.benchmarks:
            print(f"{r.name:40} {r.kind:15} {r.why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
