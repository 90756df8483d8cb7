"""What one throughput run is, read once: the model's JSON config, its MODEL_TYPE and the flags, as the seed's
users type them (`train_fsdp.py CONFIG MODEL_TYPE --batch_size 3 --enable_fp8 True`).

The flags keep the shape of AMD's `train_fsdp.py` (python-fire): `--name value` or `--name=value`, with dashes
as well, booleans as `True`/`False` (a bare `--enable_fp8` is True). Every problem is a `ConfigError` naming
the flag, the file or the key.

The JSON configs use the keys of AMD's (`configs/*.json` of pytorch-training-benchmark), so their files run
here unchanged; ours add `name` (the row of AMD's table it reproduces) and `rope_scaling` (Llama 3.1's).
FLUX's config is the `transformer` arguments of diffusers' `FluxTransformer2DModel` plus the image size and
text length of the synthetic batches.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from training.common.config import FP8_BACKENDS, ConfigError
from training.llama.attention import ATTENTIONS
from training.llama.model import LlamaShape, RopeScaling

MODEL_TYPES = ("llama", "mistral", "flux")
# AMD's keys -> LlamaShape's fields (pytorch-training-benchmark: LLaMAConfig, MistralConfig)
LLM_KEYS = {
    "num_layers": "num_layers",
    "num_heads": "num_heads",
    "num_kv_heads": "num_kv_heads",
    "embedding_dim": "hidden_size",
    "hidden_dim": "ffn_hidden_size",
    "vocab_size": "vocab_size",
    "max_seq_len": "max_seq_length",
    "eps": "norm_eps",
    "rope_base": "rope_theta",
    "window_size": "sliding_window",
}
LLM_REQUIRED = (
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "embedding_dim",
    "hidden_dim",
    "vocab_size",
    "max_seq_len",
)
LLM_EXTRA = ("name", "arch_name", "rope_scaling")
LLM_KINDS = {
    **dict.fromkeys(LLM_REQUIRED, "int"),
    "window_size": "int?",
    "eps": "number",
    "rope_base": "number",
}
FLUX_KEYS = ("name", "arch_name", "transformer", "resolution", "text_length", "vae_scale_factor")


@dataclass(frozen=True)
class ModelSpec:
    """A model config file, read: an LLM's `shape`, or FLUX's `flux` (its arguments and batch shape)."""

    name: str  # the row of AMD's table ("Llama 3.1 8B", ...), else the file's stem
    model_type: str
    path: Path
    shape: LlamaShape | None = None
    flux: FluxSpec | None = None


@dataclass(frozen=True)
class FluxSpec:
    transformer: dict  # FluxTransformer2DModel's constructor arguments
    resolution: int = 512  # image side in pixels (AMD's FluxBenchmark runs at 512)
    text_length: int = 512  # T5 tokens per prompt (FLUX.1-dev's max_sequence_length)
    vae_scale_factor: int = 8  # pixels per latent; latents are packed 2 x 2 into tokens

    @property
    def image_tokens(self) -> int:
        return (self.resolution // (2 * self.vae_scale_factor)) ** 2

    @property
    def latent_channels(self) -> int:
        return self.transformer.get("in_channels", 64)


# FluxTransformer2DModel's arguments this suite knows (diffusers 0.3x), and what each must be
FLUX_TRANSFORMER = {
    "patch_size": "int",
    "in_channels": "int",
    "out_channels": "int?",
    "num_layers": "int",
    "num_single_layers": "int",
    "attention_head_dim": "int",
    "num_attention_heads": "int",
    "joint_attention_dim": "int",
    "pooled_projection_dim": "int",
    "guidance_embeds": "bool",
    "axes_dims_rope": "ints",
}
KINDS = {
    "int": "a positive integer",
    "int?": "a positive integer or null",
    "number": "a positive number",
    "bool": "true or false",
    "ints": "a list of positive integers",
    "text": "a string",
}


def _read_json(path: Path) -> dict:
    """The JSON object in `path`; a ConfigError naming the file for anything else."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such model config") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: a folder, not a model config (configs/throughput/*.json)") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read ({err.strerror or err})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {data[err.start]:#04x} at offset {err.start}): "
            "not a JSON model config"
        ) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not JSON ({err})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a model config is a JSON object")
    return raw


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check(path: Path, key: str, value, kind: str) -> None:
    """A ConfigError naming `key` unless `value` is of `kind` (KINDS): "8192" (a string) is not a number."""
    ok = {
        "int": _whole(value),
        "int?": value is None or _whole(value),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf,
        "bool": isinstance(value, bool),
        "ints": isinstance(value, list) and all(_whole(v) for v in value),
        "text": isinstance(value, str),
    }[kind]
    if not ok:
        raise ConfigError(f"{path}: {key} must be {KINDS[kind]}, not {value!r}")


def _rope_scaling(path: Path, value) -> RopeScaling | None:
    if value in (None, {}):
        return None
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: rope_scaling must be an object (Llama 3.1's) or null, not {value!r}")
    known = [f.name for f in dataclasses.fields(RopeScaling)]
    _unknown(path, value, known, where="rope_scaling")
    for key, item in value.items():
        _check(path, f"rope_scaling.{key}", item, "int" if key.startswith("original") else "number")
    return RopeScaling(**value)


def load_model(path: Path, model_type: str) -> ModelSpec:
    """The JSON config at `path` for MODEL_TYPE `model_type`; a ConfigError naming the file and key."""
    if model_type not in MODEL_TYPES:
        raise ConfigError(f"MODEL_TYPE {model_type!r} is not one of {', '.join(MODEL_TYPES)}")
    raw = _read_json(path)
    for key in ("name", "arch_name"):
        if key in raw:
            _check(path, key, raw[key], "text")
    arch = raw.get("arch_name")
    if arch is not None and arch != model_type:
        raise ConfigError(f"{path} is a {arch} config (arch_name), not {model_type}")
    name = raw.get("name", Path(path).stem)
    if model_type == "flux":
        _unknown(path, raw, FLUX_KEYS)
        if not isinstance(raw.get("transformer"), dict):
            raise ConfigError(f"{path}: FLUX needs `transformer`, FluxTransformer2DModel's arguments")
        _unknown(path, raw["transformer"], FLUX_TRANSFORMER, where="transformer")
        for key, value in raw["transformer"].items():
            _check(path, f"transformer.{key}", value, FLUX_TRANSFORMER[key])
        fields = {k: raw[k] for k in ("resolution", "text_length", "vae_scale_factor") if k in raw}
        for key, value in fields.items():
            _check(path, key, value, "int")
        return ModelSpec(name, model_type, Path(path), flux=FluxSpec(raw["transformer"], **fields))
    _unknown(path, raw, (*LLM_KEYS, *LLM_EXTRA))
    missing = [k for k in LLM_REQUIRED if k not in raw]
    if missing:
        raise ConfigError(f"{path}: missing {', '.join(missing)}")
    for key, kind in LLM_KINDS.items():
        if key in raw:
            _check(path, key, raw[key], kind)
    values = {LLM_KEYS[k]: raw[k] for k in LLM_KEYS if k in raw}
    if "rope_scaling" in raw:
        values["rope_scaling"] = _rope_scaling(path, raw["rope_scaling"])
    elif model_type == "mistral":
        values["rope_scaling"] = None
    if model_type == "mistral":
        values.setdefault("rope_theta", 10000.0)  # Mistral 7B v0.1's RoPE base
    shape = LlamaShape(**values)
    if shape.hidden_size % shape.num_heads or shape.num_heads % shape.num_kv_heads:
        raise ConfigError(
            f"{path}: embedding_dim {shape.hidden_size}, num_heads {shape.num_heads} and num_kv_heads "
            f"{shape.num_kv_heads} do not divide into heads and KV groups"
        )
    return ModelSpec(name, model_type, Path(path), shape=shape)


def _unknown(path: Path, raw: dict, known, where: str = "") -> None:
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else f"; known: {', '.join(known)}"
            raise ConfigError(f"{path}: unknown key {(where + '.' if where else '') + key!r}{hint}")


@dataclass(frozen=True)
class RunArgs:
    """The flags of one run."""

    config_file: Path
    model_type: str
    batch_size: int | None = 1  # sequences (images) per GPU per iteration; None: the largest that fits
    enable_fp8: bool = False
    num_iteration: int = 128  # iterations (micro-batches), the first half warm-up, as AMD's script (FLUX 20)
    seed: int = 1024
    seq_len: int | None = None  # default: the config's max_seq_len
    grad_accum: int = 8  # iterations per optimizer step (AMD's grad_accumlate_pre_steps; FLUX 1)
    enable_compile: bool = True
    activation_checkpointing: bool = False
    reduce_each_iteration: bool = True  # FSDP2 reduce-scatters after every iteration, not once per step
    # one GPU, BF16, one iteration a step: AdamW keeps the matrices in bf16 (fp32 masters), no autocast casts
    bf16_weights: bool = True
    fp8_backend: str = "auto"
    attention: str = "auto"
    num_layers: int | None = None  # fewer blocks at full width: a multi-GPU model on one GPU
    json: Path | None = None  # write the result here (rank 0)

    @property
    def warmup_steps(self) -> int:
        """Optimizer steps left out of the figures: those of the first half of the iterations (at least 1)."""
        return max(1, self.steps // 2)

    @property
    def steps(self) -> int:
        return self.num_iteration // self.grad_accum


def _positive(flag: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a positive integer, not {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} takes a positive integer, not {text!r}")
        return value

    return parse


def _batch(text: str) -> int | None:
    if text == "auto":
        return None
    return _positive("--batch_size")(text)


def _bool(flag: str):
    def parse(text: str) -> bool:
        if text in ("True", "true", "1"):
            return True
        if text in ("False", "false", "0"):
            return False
        raise argparse.ArgumentTypeError(f"{flag} takes True or False, not {text!r}")

    return parse


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors raised (as ConfigError) instead of printed, and a near flag suggested."""

    def error(self, message: str):
        if message.startswith("unrecognized arguments:"):
            words = message.split(":", 1)[1].split()
            flags = [w.split("=")[0] for w in words if w.startswith("--")]
            known = [o for a in self._actions for o in a.option_strings]
            hints = [
                f" (did you mean {m[0]}?)" if (m := difflib.get_close_matches(f, known, n=1)) else ""
                for f in flags
            ]
            if flags:
                message = "unknown flag " + ", ".join(f + h for f, h in zip(flags, hints))
        raise ConfigError(message)


USAGE = """\
torchrun --nproc_per_node=N train_fsdp.py CONFIG MODEL_TYPE [flags]   one model on N GPUs
       python train_fsdp.py CONFIG MODEL_TYPE [flags]                       one model, one process
       python train_fsdp.py --suite [suite flags]     every row of AMD's table (--suite --help: its flags)"""
DESCRIPTION = """\
Training throughput of one model under FSDP2 on synthetic data: tokens (images) and TFLOP/s per GPU, beside
AMD's published figure (training/throughput/README.md). Flags take AMD's shapes: --name value or
--name=value, dashes or underscores (--batch-size), True/False (a bare --enable_fp8 is True). On a CPU, try
configs/throughput/tiny-llama.json."""


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="train_fsdp.py",
        usage=USAGE,
        description=DESCRIPTION,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config_file", type=Path, help="a JSON model config (configs/throughput/*.json)")
    p.add_argument("model_type", help=" | ".join(MODEL_TYPES))

    def add(name: str, aliases: tuple[str, ...], **kw):
        """--name, listed in --help; its other spellings (dashes, AMD's names) accepted, not listed twice."""
        p.add_argument(f"--{name}", dest=name, **kw)
        hidden = {k: v for k, v in kw.items() if k not in ("help", "default", "metavar")}
        for alias in dict.fromkeys(f"--{a}" for a in (name.replace("_", "-"), *aliases)):
            if alias != f"--{name}":
                p.add_argument(alias, dest=name, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **hidden)

    def flag(name: str, aliases: tuple[str, ...] = (), **kw):  # a flag with a value
        add(name, aliases, **kw)

    def switch(name: str, default: bool, help: str):
        add(
            name,
            (),
            nargs="?",
            const=True,
            default=default,
            type=_bool(f"--{name}"),
            metavar="True|False",
            help=help,
        )

    flag("batch_size", type=_batch, default=1, help="per GPU per iteration, or auto: the largest that fits")
    switch("enable_fp8", False, "FP8 matmuls in the transformer blocks")
    flag(
        "num_iteration",
        type=_positive("--num_iteration"),
        default=None,
        help="iterations (micro-batches); the first half warm up (default 128, FLUX 20)",
    )
    flag("seed", type=int, default=1024)
    flag("seq_len", type=_positive("--seq_len"), default=None, help="default: the config's max_seq_len")
    flag(
        "grad_accum",
        ("grad_accumlate_pre_steps",),
        type=_positive("--grad_accum"),
        default=None,
        help="iterations per optimizer step (default 8 as AMD's script, whose name "
        "--grad_accumlate_pre_steps works too; FLUX 1)",
    )
    switch("enable_compile", True, "torch.compile each block (default True)")
    switch("activation_checkpointing", False, "recompute each block in backward (default False)")
    switch(
        "reduce_each_iteration",
        True,
        "reduce-scatter the gradients after every iteration, as AMD's FSDP1 (default True); False: once "
        "per optimizer step, the model's unsharded fp32 gradients held in between (4 bytes a parameter)",
    )
    switch(
        "bf16_weights",
        True,
        "one GPU, BF16, one iteration a step: AdamW keeps the matrices in bf16 with fp32 masters, no "
        "autocast casts (default True); False: fp32 weights cast by autocast each step",
    )
    flag(
        "fp8_backend",
        choices=FP8_BACKENDS,
        default="auto",
        help="auto: Transformer Engine where importable, else ours (native) on NVIDIA GPUs and the CPU, "
        "torchao on MI300-class GPUs",
    )
    flag(
        "attention",
        choices=ATTENTIONS,
        default="auto",
        help="the Llama models' attention kernel: auto (see the README), sdpa, cudnn (cuDNN's banded "
        "SDPA for a window), flash_attn (FlashAttention-2), flash4 (FlashAttention-4)",
    )
    flag(
        "num_layers",
        type=_positive("--num_layers"),
        default=None,
        help="fewer blocks at the config's width (a multi-GPU model on fewer GPUs; FLUX: double blocks, "
        "single ones twice as many)",
    )
    flag("json", type=Path, default=None, help="also write the result as JSON here (checked before the run)")
    return p


def check_writable(path: Path, flag: str, folder: bool = False, probe: bool = False) -> None:
    """A ConfigError naming `flag` unless `path` (a file, or a folder with `folder`) can be written: checked
    before a run, so that its result is not lost at the end. Without `probe` nothing is written (a folder in
    the way, a file where a folder must be, no permission); with it, the folder is made and a temporary file
    written and removed in it (root passes every permission check, a read-only mount does not)."""
    path = Path(path)
    if path.is_dir() and not folder:
        raise ConfigError(f"{flag} {path}: a folder; give a file name (e.g. {path}/result.json)")
    if path.exists() and not path.is_dir() and folder:
        raise ConfigError(f"{flag} {path}: a file, not a folder")
    where = path if folder else path.parent
    existing = where
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{flag} {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"{flag} {path}: cannot be written (no write permission in {existing})")
    if probe:
        try:
            where.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=where):
                pass
        except OSError as err:
            raise ConfigError(f"{flag} {path}: cannot be written ({err.strerror or err})") from None


def parse_args(argv: list[str]) -> RunArgs:
    """The flags, checked against each other; ConfigError naming the flag otherwise."""
    try:
        ns = parser().parse_args(argv)
    except ConfigError:
        raise
    except SystemExit as exit_:  # --help
        raise SystemExit(exit_.code) from None
    if ns.model_type not in MODEL_TYPES:
        raise ConfigError(f"MODEL_TYPE {ns.model_type!r} is not one of {', '.join(MODEL_TYPES)}")
    flux = ns.model_type == "flux"
    defaults = {"num_iteration": 20 if flux else 128, "grad_accum": 1 if flux else 8}
    args = RunArgs(**{k: defaults[k] if v is None and k in defaults else v for k, v in vars(ns).items()})
    if args.num_iteration % args.grad_accum:
        raise ConfigError(
            f"--num_iteration {args.num_iteration} is not a multiple of --grad_accum {args.grad_accum} "
            "(iterations per optimizer step)"
        )
    if args.steps < 2:
        raise ConfigError(
            f"--num_iteration {args.num_iteration} with --grad_accum {args.grad_accum} is "
            f"{args.steps} optimizer step; a measurement needs 2 (one to warm up, one measured)"
        )
    if args.model_type == "flux" and args.enable_fp8:
        raise ConfigError("--enable_fp8 True: FLUX runs in BF16 only (as AMD's table)")
    if args.json is not None:
        check_writable(args.json, "--json")
    return args


def model_for(args: RunArgs) -> ModelSpec:
    """The config file of `args`, read, with --seq_len and --num_layers applied."""
    spec = load_model(args.config_file, args.model_type)
    if spec.shape is not None:
        shape = spec.shape.replace(max_seq_length=args.seq_len, num_layers=args.num_layers)
        return dataclasses.replace(spec, shape=shape)
    if args.seq_len is not None:
        raise ConfigError("--seq_len: FLUX's sequence is set by the image size (`resolution` in its config)")
    if args.num_layers is not None:
        blocks = {"num_layers": args.num_layers, "num_single_layers": 2 * args.num_layers}
        flux = dataclasses.replace(spec.flux, transformer={**spec.flux.transformer, **blocks})
        return dataclasses.replace(spec, flux=flux)
    return spec
