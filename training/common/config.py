"""Benchmark configs: sourced `export NAME=value` shell files, read here once into a frozen dataclass.

Each benchmark declares its variables as dataclass fields made with `var("ENV_NAME", default)`, every number
with its range (`bounds`). `from_env` converts every value by the field's type, collects all problems
(missing, malformed, out of range, unknown names with the closest known name suggested) and raises one
`ConfigError` naming each variable. AMD's and NVIDIA's own names are read through the vendor vocabulary
(`vendor_vars`): honored ones set ours, the others are recorded as not applicable. Nothing else in the package
reads `os.environ`.
"""

from __future__ import annotations

import contextvars
import dataclasses
import difflib
import json
import math
import os
import re
import subprocess
import sys
import types
import typing
from pathlib import Path

from training.common import backends, vendor_vars
from training.common.files import write_text_atomic

ROOT = Path(__file__).resolve().parents[2]

# The values FP8's shared settings may take; what each does is `training.fp8`'s.
FP8_BACKENDS = ("auto", "te", "torchao", "native")  # FP8_BACKEND
FP8_RECIPES = ("tensorwise", "rowwise")  # FP8_RECIPE (torchao)
FP8_CASTS = ("auto", "pytorch")  # FP8_CASTS (native)
FP8_AMAX_ALGOS = ("most_recent", "max")  # FP8_AMAX_ALGO (delayed scaling: native, te)

# Variables a config may set that the launchers, not the Python trainer, consume.
LAUNCHER_VARS = frozenset(
    "BENCHMARK CONFIG_FILE CONT CONT_NAME CONTAINER_RUNTIME DATADIR LOGDIR NEXP CLEAR_CACHES DGXSYSTEM "
    "DGXNNODES DGXNGPU WALLTIME WALLTIME_RUNANDTIME SEED CONFIG_VARS RUN_TAG CHECK_COMPLIANCE MASTER_ADDR "
    "MASTER_PORT LOGDIR_MB_PER_RUN MLPERF_REPO CONSOLE DROPCACHE_CMD CONT_WORKDIR MODELDIR".split()
)
# Prefixes of variables read by the libraries underneath (NCCL, ROCm, CUDA, PyTorch, OpenMP, SLURM ...); one
# of these names that is close to a known variable is still taken for a typo of it.
PASSTHROUGH_PREFIXES = (
    "NCCL_",
    "RCCL_",
    "HIP_",
    "HSA_",
    "ROCM_",
    "ROCBLAS_",
    "MIOPEN_",
    "AMD_",
    "GPU_",
    "CUDA_",
    "CUBLAS",
    "CUDNN_",
    "NVTE_",
    "TORCH_",
    "PYTORCH_",
    "TORCHINDUCTOR_",
    "TRITON_",
    "OMP_",
    "MKL_",
    "UCX_",
    "GLOO_",
    "SBATCH_",
    "SLURM_",
    "PYTHON",
    "TE_",
)


class ConfigError(ValueError):
    """A config problem; the message names every offending variable."""


# While from_env builds a config: the name each variable was given by, where it was one of its aliases
# (LORA_RANK for LORA_DIM), so that a problem found in the config's checks names what the user wrote.
_GIVEN_NAMES: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "given_names", default=None
)


def given_name(env: str) -> str:
    """The name the user set variable `env` by (one of its aliases, or itself)."""
    return (_GIVEN_NAMES.get() or {}).get(env, env)


def var(
    env: str, default=dataclasses.MISSING, help: str = "", aliases: tuple[str, ...] = (), bounds: str = ""
):
    """A config field read from environment variable `env` (required when no default is given).
    `aliases`: other vendors' names for the same setting (e.g. NVIDIA's `LR` for AMD's `MAX_LR`).
    `bounds`: where a number must lie, as "> 0", ">= 0" or an interval "[0, 1)"; floats must be finite too."""
    meta = {"env": env, "help": help, "aliases": tuple(aliases), "bounds": bounds}
    return dataclasses.field(default=default, metadata=meta)


def bound_problem(name: str, value: float | None, bounds: str) -> str | None:
    """`NAME=value must be ...` when the number `value` is not finite or lies outside `bounds` (see `var`)."""
    if value is None or not bounds:
        return None
    if bounds.startswith(">"):
        low = float(bounds.lstrip(">= "))
        inside = value >= low if bounds.startswith(">=") else value > low
        rule = bounds
    else:
        low, high = (float(x) for x in bounds[1:-1].split(","))
        above = low <= value if bounds[0] == "[" else low < value
        inside = above and (value <= high if bounds[-1] == "]" else value < high)
        rule = f"in {bounds}"
    if not math.isfinite(value):
        return f"{name}={value} must be a finite number {rule}"
    return None if inside else f"{name}={value} must be {rule}"


def _lookup(f: dataclasses.Field, environ: typing.Mapping[str, str]) -> tuple[str, str | None, list[str]]:
    """(name used, raw value, problems) for field `f`: its variable, else the one alias that is set."""
    names = (f.metadata["env"], *f.metadata.get("aliases", ()))
    found = [(n, environ[n]) for n in names if environ.get(n) not in (None, "")]
    if not found:
        return names[0], None, []
    if len({raw for _, raw in found}) > 1:
        given = ", ".join(f"{n}={raw!r}" for n, raw in found)
        return found[0][0], None, [f"{given}: the same setting given twice with different values"]
    return found[0][0], found[0][1], []


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What every benchmark's config shares: submission fields, scale, precision, and what the runner sets per
    run. A benchmark's config subclasses it, adds its own variables and calls `shared_problems()` from its
    `__post_init__`."""

    PRECISIONS: typing.ClassVar[tuple[str, ...]] = ("auto", "fp32", "bf16", "fp8")
    BATCH_VAR: typing.ClassVar[str] = ""  # the variable the third number of DGXSYSTEM's NxGxB names
    BENCHMARK: typing.ClassVar[typing.Any] = None  # its row of training.benchmarks (set by each benchmark)

    seed: int | None = var(
        "SEED", None, help="run seed; drawn at random when unset", bounds="[0, 2147483648)"
    )
    log_freq: int = var("LOG_FREQ", 50, help="steps between loss lines and NaN checks", bounds="> 0")
    org: str = var("MLPERF_SUBMISSION_ORG", "reference_implementation")
    platform: str = var("MLPERF_SUBMISSION_PLATFORM", "unknown")
    ruleset: str | None = var(
        "MLPERF_RULESET",
        None,
        help="the MLPerf round whose rules the run follows and is checked by (e.g. 5.1.0); unset: the latest "
        "round of the benchmark",
    )
    system: str = var("DGXSYSTEM", "unknown", help="derived from the config file name")
    config_filename: str | None = var(
        "CONFIG_FILENAME", None, help="set by the launcher: the name of the config file sourced (MLLOG's)"
    )
    num_nodes: int = var("DGXNNODES", 1, bounds="> 0")
    gpus_per_node: int = var("DGXNGPU", 1, bounds="> 0")
    precision: str = var(
        "PRECISION",
        "auto",
        help="auto (bf16 on GPUs, fp32 on the CPU) | fp32 | bf16 | fp8 (bf16 with FP8 matmuls)",
    )
    fp8_switch: bool | None = var("FP8", None, help="NVIDIA's and AMD's name: FP8=1 is PRECISION=fp8")
    fp8_backend: str = var(
        "FP8_BACKEND",
        "auto",
        help="PRECISION=fp8: auto (native where OCP FP8 runs, else Transformer Engine, else torchao) | te | "
        "torchao | native (ours)",
    )
    fp8_casts: str = var(
        "FP8_CASTS",
        "auto",
        help="FP8_BACKEND=native: auto (Triton on GPUs where it matches PyTorch's) | pytorch",
    )
    fp8_fast_accum: bool = var(
        "FP8_FAST_ACCUM",
        False,
        help="FP8_BACKEND=native: 1: the forward GEMMs accumulate in the tensor cores' own precision "
        "(cuBLASLt's fast accumulation), the gradients' GEMMs with promoted partial sums, as Transformer "
        "Engine and torchao; 0: every GEMM with promoted partial sums",
    )
    fp8_amax_history: int = var(
        "FP8_AMAX_HISTORY",
        4,
        help="delayed scaling's amax history: steps whose amaxes a cast's scale is chosen from (native, te)",
        bounds="> 0",
    )
    fp8_amax_algo: str = var(
        "FP8_AMAX_ALGO",
        "most_recent",
        help="most_recent (the last step's amax; the history length then changes nothing) | max (the largest "
        "of the history)",
    )
    clear_caches: bool = var(
        "CLEAR_CACHES", False, help="set by the runner: page cache dropped before the run"
    )
    logdir: Path | None = var("LOGDIR", None)
    run_tag: str | None = var("RUN_TAG", None, help="set by the runner: <benchmark>_<system>_<i>")
    is_cpu_demo: bool = var("CPU_DEMO", False, help="a small non-MLPerf run: tiny model, marked not valid")
    # Not a variable: the vendor names the environment gave (`vendor_vars.Translation.record`), recorded.
    vendor_names: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_env(cls, environ: typing.Mapping[str, str], config_vars: typing.Iterable[str] = ()):
        return from_env(cls, environ, config_vars)

    def world_size(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def requested_precision(self) -> str:
        """PRECISION, with NVIDIA's FP8=1 folded in."""
        return "fp8" if self.fp8_switch else self.precision

    def substitutions(self, world_size: int) -> list[str]:
        """What a run of this config on `world_size` ranks does otherwise than the config asks, a line each
        naming the setting, what runs instead and why: a vendor layout or precision not implemented here, run
        as the nearest one that is, with the same recipe. The preflight and the trainer print them; the
        effective config records them. Empty by default."""
        return []

    def no_evaluation(self, world_size: int) -> str | None:
        """Why a run of this config on `world_size` ranks would stop before its first evaluation, in one line
        naming the variables of its schedule, the rule and values that would work; None where it evaluates.
        Each benchmark answers from the schedule its loop runs (`schedule`)."""
        return None

    def shared_problems(self) -> list[str]:
        """The checks of the shared variables and the range of every number, each naming its variable."""
        bounds = [
            bound_problem(given_name(f.metadata["env"]), getattr(self, f.name), f.metadata["bounds"])
            for f in variables(self)
        ]
        problems = [problem for problem in bounds if problem]
        for name, value, choices in (
            ("PRECISION", self.precision, self.PRECISIONS),
            ("FP8_BACKEND", self.fp8_backend, FP8_BACKENDS),
            ("FP8_CASTS", self.fp8_casts, FP8_CASTS),
            ("FP8_AMAX_ALGO", self.fp8_amax_algo, FP8_AMAX_ALGOS),
        ):
            if value not in choices:
                problems.append(f"{name}={value!r} is not one of {', '.join(choices)}")
        if self.fp8_switch is True and self.precision not in ("auto", "bf16", "fp8"):
            problems.append(f"FP8=1 (bf16 with FP8 matmuls) contradicts PRECISION={self.precision}")
        if self.fp8_switch is False and self.precision == "fp8":
            problems.append("FP8=0 contradicts PRECISION=fp8")
        bench = self.BENCHMARK
        if self.ruleset and bench and (why := bench.ruleset_problem(self.ruleset)):
            problems.append(f"MLPERF_RULESET={self.ruleset}: {why}; unset it for {bench.ruleset}")
        return problems

    def effective_ruleset(self) -> str | None:
        """The round the run follows: MLPERF_RULESET, else its benchmark's latest."""
        return self.ruleset or (self.BENCHMARK.ruleset if self.BENCHMARK else None)

    def scale_problems(self, world_size: int | None = None) -> list[str]:
        """The arithmetic of a config derived for another machine: the <NODES>x<GPUS>x<BATCH> of its name
        (DGXSYSTEM) against its values, and nodes x GPUs against the launcher's world size (when known).
        Benchmarks add their own batch arithmetic."""
        problems = []
        name = re.fullmatch(r".+_(\d+)x(\d+)x(\d+)(?:_.+)?", self.system)
        if name and self.BATCH_VAR:
            batch = getattr(self, env_fields(type(self))[self.BATCH_VAR])
            values = {"DGXNNODES": self.num_nodes, "DGXNGPU": self.gpus_per_node, self.BATCH_VAR: batch}
            said = dict(zip(values, map(int, name.groups())))
            problems += [
                f"DGXSYSTEM={self.system} says {var}={said[var]}, but the config sets {var}={have}"
                for var, have in values.items()
                if said[var] != have
            ]
        if world_size is not None and world_size != self.world_size():
            problems.append(
                f"DGXNNODES={self.num_nodes} x DGXNGPU={self.gpus_per_node} = "
                f"{self.world_size()} ranks, but the launcher starts {world_size}"
            )
        return problems


def variables(cls) -> list[dataclasses.Field]:
    """The fields of a config dataclass that are read from a variable (made with `var`)."""
    return [f for f in dataclasses.fields(cls) if "env" in f.metadata]


def env_names(cls) -> dict[str, str]:
    """Field name -> environment variable name, for a config dataclass."""
    return {f.name: f.metadata["env"] for f in variables(cls)}


def env_fields(cls) -> dict[str, str]:
    """Environment variable name -> field name, for a config dataclass."""
    return {f.metadata["env"]: f.name for f in variables(cls)}


def describe(cls) -> str:
    """The variables of a config class, one per line with its default, aliases and help: what an entry
    point's --help prints."""
    lines = []
    for f in variables(cls):
        name, meta = f.metadata["env"], f.metadata
        default = "required" if f.default is dataclasses.MISSING else f"default {f.default}"
        aliases = f" (also {', '.join(meta['aliases'])})" if meta.get("aliases") else ""
        lines.append(f"  {name}{aliases}: {default}" + (f"; {meta['help']}" if meta["help"] else ""))
    return "\n".join(lines)


def config_from_environment(cls, doc: str, argv: list[str] | None = None):
    """An entry point's configuration: `cls` built from the environment (the variables the runner's config
    file exported are listed in CONFIG_VARS). `--help` prints `doc` and the variables and exits 0; any other
    argument is an error (everything is configured through the environment)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(f"{doc.strip()}\n\nVariables (read from the environment):\n{describe(cls)}")
        raise SystemExit(0)
    if argv:
        raise ConfigError(
            f"unexpected arguments {' '.join(argv)}: settings come from the environment (see --help)"
        )
    return from_env(cls, os.environ, os.environ.get("CONFIG_VARS", "").split())


def _convert(raw: str, typ):
    if isinstance(typ, types.UnionType) or typing.get_origin(typ) is typing.Union:
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if raw.lower() in ("", "none", "null"):
            return None
        return _convert(raw, args[0])
    if typ is bool:
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError("expected 0/1, true/false, yes/no")
    if typ is int:
        value = float(raw)  # accept 4.5e6 and 4500000.0 the way configs write them, but only whole numbers
        if not value.is_integer():
            raise ValueError("expected a whole number")
        return int(value)
    if typ is float:
        return float(raw)
    if typ is Path:
        return Path(raw)
    if typ is str:
        return raw
    raise TypeError(f"unsupported config field type {typ!r}")


def from_env(cls, environ: typing.Mapping[str, str], config_vars: typing.Iterable[str] = ()):
    """Build `cls` from `environ`. `config_vars` are the names the user's config file exported; any that
    neither `cls`, the launchers nor the vendor vocabulary know is reported as a likely typo. AMD's and
    NVIDIA's names set ours first (`vendor_vars.translate`); what they set and the names not applicable here
    are kept in the config's `vendor_names`."""
    config_vars = list(config_vars)
    bench = cls.BENCHMARK.name if getattr(cls, "BENCHMARK", None) is not None else None
    vendor = vendor_vars.translate(environ, bench, config_vars)
    environ = vendor.environ
    hints = typing.get_type_hints(cls)
    problems, values, given = list(vendor.problems), {}, {}
    for f in variables(cls):
        name, raw, clash = _lookup(f, environ)
        given[f.metadata["env"]] = name
        problems += clash
        if raw is None:
            if f.default is dataclasses.MISSING and not clash:
                problems.append(f"{name}: required but not set ({f.metadata['help'] or f.name})")
            continue
        try:
            values[f.name] = _convert(raw, hints[f.name])
        except ValueError as err:
            problems.append(f"{name}={raw!r}: {err}")
    known = set(env_names(cls).values()) | LAUNCHER_VARS | vendor_vars.names(bench)
    known |= {alias for f in variables(cls) for alias in f.metadata.get("aliases", ())}
    for name in config_vars:
        if name in known:
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        if name.startswith(PASSTHROUGH_PREFIXES) and not difflib.get_close_matches(name, known, cutoff=0.8):
            continue  # a library's variable, not a misspelt one of ours
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(f"{name}: not a variable of this benchmark{hint}")
    if problems:
        raise ConfigError(f"{cls.__name__}: " + "; ".join(problems))
    if "vendor_names" in {f.name for f in dataclasses.fields(cls)}:
        values["vendor_names"] = vendor.record()
    token = _GIVEN_NAMES.set(given)
    try:
        return cls(**values)
    except ConfigError as err:
        raise ConfigError(f"{cls.__name__}: {err}") from None
    finally:
        _GIVEN_NAMES.reset(token)


def to_env_dict(cfg) -> dict[str, object]:
    """The effective config as {ENV_NAME: value}, JSON-ready."""
    out = {}
    for f in variables(cfg):
        value = getattr(cfg, f.name)
        out[f.metadata["env"]] = str(value) if isinstance(value, Path) else value
    return out


def git_commit() -> str:
    """The commit of the code that runs, `+dirty` with uncommitted changes; "unknown" outside a checkout (an
    image built without .git)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise OSError(done.stderr.strip())
        return done.stdout.strip()

    try:
        return git("rev-parse", "HEAD") + (
            "+dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_effective_config(cfg, path: Path, extra: dict | None = None) -> None:
    """Write the effective config (and `extra`: derived values, versions, backends) as JSON, with the commit
    of the code and the accelerator that ran it (the submission package's system description reads them),
    and the vendor names the config gave: those honored and what they set, those not applicable here."""
    record = {
        "config": to_env_dict(cfg),
        "git_commit": git_commit(),
        "accelerator": backends.accelerator_name(),
        **(extra or {}),
    }
    if getattr(cfg, "vendor_names", None):
        record["vendor_names"] = cfg.vendor_names
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(record, indent=2, default=str) + "\n")


def system_from_config_path(path: str | Path) -> str:
    """`configs/bert/config_MI300X_1x8x48.sh` -> `MI300X_1x8x48` (the DGXSYSTEM convention)."""
    match = re.fullmatch(r"config_(.+)\.sh", Path(path).name)
    if not match:
        raise ConfigError(f"config file name {Path(path).name!r} does not match config_<SYSTEM>.sh")
    return match.group(1)
