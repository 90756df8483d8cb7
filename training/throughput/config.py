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
from dataclasses import dataclass
from pathlib import Path

from training.common.config import ConfigError
from training.fp8 import BACKENDS as FP8_BACKENDS
from training.llama.model import ATTENTIONS, LlamaShape, RopeScaling

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
LLM_REQUIRED = ("num_layers", "num_heads", "num_kv_heads", "embedding_dim", "hidden_dim", "vocab_size",
                "max_seq_len")  # fmt: skip
LLM_EXTRA = ("name", "arch_name", "rope_scaling")
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


def load_model(path: Path, model_type: str) -> ModelSpec:
    """The JSON config at `path` for MODEL_TYPE `model_type`; a ConfigError naming the file and key."""
    if model_type not in MODEL_TYPES:
        raise ConfigError(f"MODEL_TYPE {model_type!r} is not one of {', '.join(MODEL_TYPES)}")
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such model config") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not JSON ({err})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a model config is a JSON object")
    arch = raw.get("arch_name")
    if arch is not None and arch != model_type:
        raise ConfigError(f"{path} is a {arch} config (arch_name), not {model_type}")
    name = raw.get("name", Path(path).stem)
    if model_type == "flux":
        _unknown(path, raw, FLUX_KEYS)
        if not isinstance(raw.get("transformer"), dict):
            raise ConfigError(f"{path}: FLUX needs `transformer`, FluxTransformer2DModel's arguments")
        fields = {k: raw[k] for k in ("resolution", "text_length", "vae_scale_factor") if k in raw}
        return ModelSpec(name, model_type, Path(path), flux=FluxSpec(raw["transformer"], **fields))
    _unknown(path, raw, (*LLM_KEYS, *LLM_EXTRA))
    missing = [k for k in LLM_REQUIRED if k not in raw]
    if missing:
        raise ConfigError(f"{path}: missing {', '.join(missing)}")
    values = {LLM_KEYS[k]: raw[k] for k in LLM_KEYS if k in raw}
    if "rope_scaling" in raw:
        values["rope_scaling"] = RopeScaling(**raw["rope_scaling"]) if raw["rope_scaling"] else None
    elif model_type == "mistral":
        values["rope_scaling"] = None
    if model_type == "mistral":
        values.setdefault("rope_theta", 10000.0)  # Mistral 7B v0.1's RoPE base
    for key in (*LLM_REQUIRED, "window_size"):
        value, optional = raw.get(key), key == "window_size"
        if not (isinstance(value, int) and value > 0) and not (optional and value is None):
            kind = "a positive integer or null" if optional else "a positive integer"
            raise ConfigError(f"{path}: {key} must be {kind}, not {value!r}")
    shape = LlamaShape(**values)
    if shape.hidden_size % shape.num_heads or shape.num_heads % shape.num_kv_heads:
        raise ConfigError(
            f"{path}: embedding_dim {shape.hidden_size}, num_heads {shape.num_heads} and num_kv_heads "
            f"{shape.num_kv_heads} do not divide into heads and KV groups"
        )
    return ModelSpec(name, model_type, Path(path), shape=shape)


def _unknown(path: Path, raw: dict, known) -> None:
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else f"; known: {', '.join(known)}"
            raise ConfigError(f"{path}: unknown key {key!r}{hint}")


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
            hints = [f" (did you mean {m[0]}?)" if (m := difflib.get_close_matches(f, known, n=1)) else ""
                     for f in flags]  # fmt: skip
            if flags:
                message = "unknown flag " + ", ".join(f + h for f, h in zip(flags, hints))
        raise ConfigError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="train_fsdp.py", description=__doc__, allow_abbrev=False,
                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("config_file", type=Path, help="a JSON model config (configs/throughput/*.json)")
    p.add_argument("model_type", help=" | ".join(MODEL_TYPES))

    def flag(name: str, **kw):
        p.add_argument(f"--{name}", f"--{name.replace('_', '-')}", dest=name, **kw)

    def switch(name: str, default: bool, help: str, aliases: tuple[str, ...] = ()):
        names = [f"--{n}" for n in (name, name.replace("_", "-"), *aliases)]
        p.add_argument(*dict.fromkeys(names), dest=name, nargs="?", const=True, default=default,
                       type=_bool(f"--{name}"), metavar="True|False", help=help)  # fmt: skip

    flag("batch_size", type=_batch, default=1, help="per GPU per iteration, or auto: the largest that fits")
    switch("enable_fp8", False, "FP8 matmuls in the transformer blocks")
    flag("num_iteration", type=_positive("--num_iteration"), default=None,
         help="iterations (micro-batches); the first half warm up (default 128, FLUX 20)")  # fmt: skip
    flag("seed", type=int, default=1024)
    flag("seq_len", type=_positive("--seq_len"), default=None, help="default: the config's max_seq_len")
    p.add_argument("--grad_accum", "--grad-accum", "--grad_accumlate_pre_steps", dest="grad_accum",
                   type=_positive("--grad_accum"), default=None,
                   help="iterations per optimizer step (default 8 as AMD's script; FLUX 1)")  # fmt: skip
    switch("enable_compile", True, "torch.compile each block (default True)")
    switch("activation_checkpointing", False, "recompute each block in backward (default False)")
    switch(
        "reduce_each_iteration",
        True,
        "reduce-scatter the gradients after every iteration, as AMD's FSDP1 (default True); False: once "
        "per optimizer step, the model's unsharded fp32 gradients held in between (4 bytes a parameter)",
    )
    flag("fp8_backend", choices=FP8_BACKENDS, default="auto",
         help="auto: Transformer Engine where importable, else ours (native) on NVIDIA GPUs and the CPU, "
              "torchao on MI300-class GPUs")  # fmt: skip
    flag("attention", choices=ATTENTIONS, default="auto",
         help="the Llama models' attention kernel: auto (see the README), sdpa, cudnn (cuDNN's banded "
              "SDPA for a window), flash_attn (FlashAttention-2), flash4 (FlashAttention-4)")  # fmt: skip
    flag("num_layers", type=_positive("--num_layers"), default=None,
         help="fewer blocks at the config's width (a multi-GPU model on fewer GPUs; FLUX: double blocks, "
              "single ones twice as many)")  # fmt: skip
    flag("json", type=Path, default=None, help="also write the result as JSON here")
    return p


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
