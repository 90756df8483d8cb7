"""A bench's variants as its benchmark's config plus overrides in the config's own names.

A variant is written on the command line as

    'LABEL: NAME=VALUE NAME=VALUE ...'

LABEL (one word ending in a colon) names the variant in the results; without it the overrides, as written,
name it (`base` when there are none). Each NAME is a variable of the benchmark's typed config (`PRECISION`,
`FP8_BACKEND`, `COMPILE`, `ACTIVATION_CHECKPOINTING`, ...), so a row of results names the lines to paste into
a config file. The words are split as the shell splits them (`shlex`), so a value may be quoted. One argument
may hold several variants separated by `;` (`'bf16:; fp8: PRECISION=fp8'`), so one shell variable holds a
list.

Every bench that takes variants has the same options (`add_arguments`): `--config FILE` (the base; default
the benchmark's typed defaults), `--set 'NAME=VALUE ...'` (overrides every variant starts from, the reference
included), `--variant '...'` (repeatable) and `--reference '...'` (the variant the others' losses are
compared with, run first; `none`: none). A row of results records its variant's overrides, those of `--set`
first.

A variant's config is built as the trainer builds its own: the benchmark's variables from a base (a shipped
config file, sourced as `training.convergence` sources one, under the bench's own values for what a bench
does not read: data folders, checkpoint, batch) with the overrides on top, through `from_env`, which
answers a misspelt name with the nearest one. (The model is torchtitan's `loss_compare.py`, whose
`--baseline-options` / `--test-options` are its config's own flags; no library parses such variants, and the
parsing here is `shlex` plus the config's own reading.)
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from training import benchmarks
from training.common.config import ConfigError, from_env


class OverrideError(ValueError):
    """A variant or override the bench cannot read, named."""


def parse(words: Sequence[str]) -> dict[str, str]:
    """`NAME=VALUE` words as {NAME: VALUE}, in order (a later word for the same NAME wins)."""
    out: dict[str, str] = {}
    for word in words:
        name, eq, value = word.partition("=")
        if not eq or not name.isidentifier() or name != name.upper():
            raise OverrideError(f"{word!r}: expected NAME=VALUE with a config variable's NAME (upper case)")
        out[name] = value
    return out


@dataclass(frozen=True)
class Variant:
    label: str
    overrides: dict[str, str]

    def words(self) -> str:
        """The overrides as config lines would set them, space-separated."""
        return words(self.overrides)


def words(overrides: Mapping[str, str]) -> str:
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in overrides.items())


def split(text: str) -> tuple[str | None, list[str]]:
    """A variant's command-line form (`LABEL: word ...`, the label optional) as (its label or None, the
    words after it), split as the shell splits them."""
    try:
        said = shlex.split(text)
    except ValueError as err:
        raise OverrideError(f"variant {text!r}: {err}") from None
    if not (said and said[0].endswith(":")):
        return None, said
    label = said[0][:-1]
    if not label or "=" in label or ":" in label:
        raise OverrideError(f"variant {text!r}: the label before ':' must be one word without '=' or ':'")
    return label, said[1:]


def each(texts: Sequence[str]) -> list[str]:
    """The variants of `texts`, each one or more separated by `;`."""
    return [one for text in texts for one in text.split(";") if one.strip()]


def check_labels(labels: Sequence[str], taken: Sequence[str] = ()) -> None:
    """Two variants with one label, or one with a label in `taken` (a peer's), are an error: the results
    are keyed by label."""
    if twice := sorted({label for label in labels if labels.count(label) > 1 or label in taken}):
        also = " or a peer's" if taken else ""
        raise OverrideError(f"variant label(s) {', '.join(twice)} given twice{also}: label each 'LABEL: ...'")


def variant(text: str) -> Variant:
    """A variant from its command-line form (`LABEL: NAME=VALUE ...`, the label optional)."""
    label, said = split(text)
    try:
        overrides = parse(said)
    except OverrideError as err:
        raise OverrideError(f"variant {text!r}: {err}") from None
    return Variant(label or words(overrides) or "base", overrides)


def variants(texts: Sequence[str]) -> list[Variant]:
    """The variants of `texts` (each one or more, `;`-separated); two with one label are an error."""
    out = [variant(one) for one in each(texts)]
    check_labels([v.label for v in out])
    return out


@dataclass(frozen=True)
class Base:
    """What every variant starts from: `environ`, of which `given` came from a config file."""

    environ: dict[str, str]
    given: tuple[str, ...] = ()


def base(benchmark: str, config: Path | None, bench_values: Mapping[str, str]) -> Base:
    """The variables a variant starts from: the config file's exports when one is given (it must be
    `benchmark`'s), under `bench_values`, what the bench sets of the settings it does not read (no data, no
    checkpoint, its own batch)."""
    if config is None:
        return Base(dict(bench_values))
    from training.convergence import CheckError, sourced

    try:
        exported = sourced(config)
    except CheckError as err:
        raise OverrideError(str(err)) from None
    if exported.get("BENCHMARK", benchmark) != benchmark:
        raise OverrideError(f"{config} is a {exported['BENCHMARK']} config, not {benchmark}'s")
    return Base({**exported, **bench_values}, tuple(exported))


def config_class(benchmark: str):
    """The benchmark's typed config class (its package's `RunSettings` subclass)."""
    from training.convergence import config_class as find

    return find(benchmarks.BENCHMARKS[benchmark])


def build(cls, start: Base, overrides: Mapping[str, str]):
    """`cls` from `start` with `overrides` on top. The overrides' names and the config file's are checked as
    a config file's are: a name `cls` does not know is an error naming the nearest one it does."""
    try:
        return from_env(cls, {**start.environ, **overrides}, [*start.given, *overrides])
    except ConfigError as err:
        raise OverrideError(str(err)) from None


def add_arguments(
    ap: argparse.ArgumentParser, variants: Sequence[str], reference: str, common: str = ""
) -> None:
    """The variant options every bench shares (this module's docstring), with the bench's defaults."""
    ap.add_argument(
        "--config",
        type=Path,
        default=None,
        help="a config file of the benchmark, the variants' base (default: its typed defaults)",
    )
    ap.add_argument(
        "--set",
        dest="common",
        default=common,
        metavar="'NAME=VALUE ...'",
        help=f"overrides every variant starts from, the reference included (default: {common!r})",
    )
    ap.add_argument(
        "--variant",
        dest="variants",
        action="append",
        default=None,
        metavar="'LABEL: NAME=VALUE ...'",
        help=f"a variant, repeatable (default: {' | '.join(map(repr, variants))})",
    )
    ap.add_argument(
        "--reference",
        default=reference,
        metavar="'LABEL: NAME=VALUE ...'",
        help="the variant the others' losses are compared with, run first ('none': none)",
    )
    ap.set_defaults(default_variants=list(variants))


@dataclass(frozen=True)
class Plan:
    """A bench call's variants in the order they run (the reference first), each with `--set`'s overrides
    under its own; `peers`: the labels of those the peer's model runs (the bench's `--peer`)."""

    reference: Variant | None
    runs: list[Variant]
    peers: frozenset[str] = frozenset()


def from_args(args: argparse.Namespace, peers: Sequence[str] = ()) -> Plan:
    """The plan of `add_arguments`' options and the bench's peer variants. A variant that is the reference
    (its label and overrides) runs once; labels must otherwise differ."""
    common = variant(args.common).overrides
    reference = None if args.reference == "none" else variant(args.reference)
    ours = [v for v in variants(args.variants or args.default_variants) if v != reference]
    theirs = variants(peers)
    found = ([reference] if reference else []) + ours + theirs
    labels = [v.label for v in found]
    if twice := sorted({label for label in labels if labels.count(label) > 1}):
        raise OverrideError(f"variant label(s) {', '.join(twice)} given twice: label each 'LABEL: ...'")
    runs = [Variant(v.label, {**common, **v.overrides}) for v in found]
    return Plan(runs[0] if reference else None, runs, frozenset(v.label for v in theirs))
