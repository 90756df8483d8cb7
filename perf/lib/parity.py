"""Loss parity beside every speed figure and every loss curve: a fast variant counts only if it trains the
model its reference trains. Each bench records every variant's per-step losses (all steps it ran, from the
first, on the same initial weights and batches as its reference: ours in bf16, eager, PyTorch kernels; or a
trusted implementation, for `curve_parity`) and `verdict`, the one verdict, compares them with the one
tolerance table (`TOLERANCE`):

- not degenerate: a first loss at ln(vocabulary) (`UNIFORM`) means uniform logits, a model that computes
  nothing (the FP8_WEIGHTS bug of 12fdffa: 10.374 = ln(32000) at every step), unless the reference starts
  there too;
- finite, and within the tolerance of the reference at every step: |loss - reference| / reference;
- it learns: where the reference's loss fell clearly (by more than half the tolerance), the variant's fell
  by at least half as much (native FP8 with scale-1 first steps barely moved: 11.999 -> 11.990 -> 11.982
  where bf16 went 12.008 -> 11.910 -> 11.751);
- only where the reference repeats itself: given a second run of the reference (`twin`: the same code,
  weights and batches), steps from the first where the two part by more than `TWIN` are not compared. From
  random weights, some benches reach a stretch where the loss spikes at steps that vary from run to run:
  two runs of the eager bf16 reference of the 8B at 24 blocks on one H200 agreed within 1% for 10 steps,
  then parted by up to 28%. Fewer than `MIN_STEPS` such steps: "undetermined", not ok;
- beside a control (`control`: a bf16 run that should train as the reference does, the reference's model
  compiled instead of eager, say), at each step the variant may part from the reference by the tolerance
  plus what the control parts by there: a long curve's chaotic stretch (a spike from random weights, where
  bf16 runs part by several percent) is neither a failure of the variant nor a place a failure hides (a
  variant farther off than the control by more than the tolerance still fails), and away from it the
  tolerance is what it is without a control;
- against measured noise (`noise`, from `noise_band`: how far the reference's own model, trained with other
  dropout seeds, parts from it at each step): the fixed tolerance is replaced by that spread, or by bf16's
  resolution (`RESOLUTION`) where the seeds agree more closely than bf16 can tell. A variant is then a model
  that trains as the reference does when its curve stays as close to the reference as another draw of the
  dropout masks does; a lever that changes what is learned parts farther, spike or calm stretch alike.
  A speed lever (`LEVERS`) is judged so twice: its curve against the reference, and against the curve of
  the mode it is added to (`lever_base`), which tells what the lever itself changes from what its mode
  (native FP8, say) changes already.

Tolerances (`TOLERANCE`), relative, per step: bf16-class variants (compiled, other kernels, the peers in bf16)
2%, FP8 variants 5%. Why these: on the same weights and batches, the bf16 variants differ from the eager
reference by rounding only (kernel fusion, another attention kernel; the peer's own loss and AdamW), which
stays well under 1% over the benches' 10-20 steps; FP8 adds e4m3/e5m2 rounding to every GEMM (about 10%
relative on each gradient, `tests/test_fp8.py`), which moves a 20-step curve by a few percent but not its
shape; over `perf/curve_parity.py`'s 50-step curves the same tolerances hold, FP8's compared after its first
steps (its delayed scaling learns its scales there: `from_step`). `perf/RESULTS.md` ("Loss parity") records
the deviations measured. A variant that fails prints "invalid" where its speed ratio would be.
"""

from __future__ import annotations

import math

TOLERANCE = {"bf16": 0.02, "fp8": 0.05}
TWIN = 0.01  # two runs of the reference farther apart than this (relative) repeat nothing at that step
MIN_STEPS = 5  # compared steps below which a verdict is "undetermined"
# a first loss this close to ln(vocabulary), in nats, is uniform logits: the FP8_WEIGHTS bug's was 5.8e-4
# above ln(32000); a healthy 2-block toy of hidden 64 starts 4.5e-3 above ln(256), the 70B width 1.6 above
UNIFORM = 1e-3
# bf16's unit roundoff, 2^-8: two losses of the bf16 model closer than this, relative, are one bf16 number
RESOLUTION = 2.0**-8
SEED_WINDOW = 1  # the noise at a step is the seeds' largest spread within this many steps of it: where two
# runs' spikes land differs by a step, and two curves that cross agree at one step by chance


def kind_of(variant: str, record: dict | None = None) -> str:
    """The tolerance class of a variant: "fp8" where its record says its matmuls ran in FP8 (`fp8_matmuls`),
    else by its name (any with "fp8" in it), "bf16" for the rest."""
    if record is not None and "fp8_matmuls" in record:
        return "fp8" if record["fp8_matmuls"] else "bf16"
    return "fp8" if "fp8" in variant else "bf16"


def as_floats(losses) -> list[float]:
    return [float(x) for x in losses]


def repeated_steps(reference: list[float], twin: list[float]) -> int:
    """How many steps, from the first, two runs of the reference agree on (within `TWIN`)."""
    for i, (a, b) in enumerate(zip(reference, twin)):
        if not (math.isfinite(a) and math.isfinite(b)) or abs(a - b) > TWIN * abs(a):
            return i
    return min(len(reference), len(twin))


def verdict(
    losses: list[float],
    reference: list[float] | None,
    uniform: float,
    kind: str = "bf16",
    reference_name: str = "reference",
    twin: list[float] | None = None,
    from_step: int = 0,
    control: list[float] | None = None,
    noise: list[float] | None = None,
) -> dict:
    """The parity record of a variant's per-step losses against its reference's (None: this is the reference,
    or none ran; the degenerate check still applies). `uniform`: the loss of uniform logits (ln(vocabulary);
    BERT adds ln 2 for next-sentence prediction). `twin`: a second run of the reference; only the steps the
    two repeat are compared; `from_step`: the steps before it are not; `control`: a bf16 run whose own
    distance from the reference widens the tolerance step by step; `noise`: the measured spread of the
    reference's own model under other dropout seeds at each step (`noise_band`), which replaces the fixed
    tolerance (never below `RESOLUTION`). `ok` is True only when every check passes; `undetermined` when too
    few steps could be compared."""
    tol = TOLERANCE[kind]
    out: dict = {"reference": reference_name, "tolerance": tol, "ok": False}
    if not losses:
        return {**out, "verdict": "no losses recorded"}
    bad = [i for i, x in enumerate(losses) if not math.isfinite(x)]
    if bad:
        return {**out, "verdict": f"non-finite loss at step {bad[0]}"}
    if abs(losses[0] - uniform) < UNIFORM and not (reference and abs(reference[0] - uniform) < UNIFORM):
        return {**out, "verdict": f"degenerate: first loss {losses[0]:.4f}, that of uniform logits"}
    if reference is None:
        return {**out, "ok": True, "verdict": "reference (not degenerate)", "steps": len(losses)}
    n = min(len(losses), len(reference))
    if twin is not None:
        repeated = repeated_steps(reference, twin)
        out["repeated_steps"] = repeated
        if repeated < min(n, MIN_STEPS):
            return {
                **out,
                "undetermined": True,
                "verdict": (
                    f"undetermined: the reference's two runs part by more than {TWIN:.0%} at step {repeated}"
                ),
            }
        n = min(n, repeated)
    deviations = [abs(a - b) / abs(b) for a, b in zip(losses[:n], reference[:n])]
    chaos = [0.0] * n  # the control's distance from the reference, step by step
    if control is not None:
        n = min(n, len(control))
        chaos = [
            abs(c - b) / abs(b) if math.isfinite(c) else math.inf for c, b in zip(control[:n], reference)
        ]
        out.update(
            control_max_rel_dev=max(chaos[from_step:n], default=0.0),
            chaotic_steps=sum(c > TOLERANCE["bf16"] for c in chaos[from_step:n]),
        )
    allowed = [tol] * n
    if noise is not None:
        n = min(n, len(noise))
        allowed = [max(x, RESOLUTION) for x in noise[:n]]
        out.update(judge="seeds", tolerance=RESOLUTION, noise_max=max(noise[from_step:n], default=0.0))
    if n <= from_step:
        what = f"undetermined: {n} steps, none from step {from_step}"
        return {**out, "undetermined": True, "verdict": what}
    allowed = [a + c for a, c in zip(allowed, chaos)]
    worst = max(range(from_step, n), key=lambda i: deviations[i] - allowed[i])
    out.update(steps=n, max_rel_dev=max(deviations[from_step:n]), worst_step=worst)
    if deviations[worst] > allowed[worst]:
        if noise is not None:
            return {
                **out,
                "verdict": f"off by {deviations[worst]:.2%} at step {worst}, where other dropout "
                f"seeds part by {noise[worst]:.2%} (bf16 resolves {RESOLUTION:.2%})",
            }
        beside = f" where the control is {chaos[worst]:.1%} off" if control is not None else ""
        return {
            **out,
            "verdict": f"off by {deviations[worst]:.1%} at step {worst}{beside} (> {tol:.0%}"
            + (" + the control's" if control is not None else "")
            + ")",
        }
    fell, ref_fell = losses[0] - losses[n - 1], reference[0] - reference[n - 1]
    if ref_fell > 0.5 * tol * reference[0] and fell < 0.5 * ref_fell:
        return {
            **out,
            "verdict": f"does not learn: loss fell {fell:.3f} where the reference's fell {ref_fell:.3f}",
        }
    where = f"{n} steps" if twin is None or n == len(losses) else f"the {n} steps its two runs repeat"
    if control is not None and out["chaotic_steps"]:
        chaotic, worst_control = out["chaotic_steps"], out["control_max_rel_dev"]
        where += f"; the control {worst_control:.1%} off at most, {chaotic} steps > 2%"
    if noise is not None:
        where += f"; other seeds {out['noise_max']:.2%} apart at most"
    return {**out, "ok": True, "verdict": f"ok ({out['max_rel_dev']:.2%} max over {where})"}


def column(record: dict | None) -> str:
    """The table's parity cell."""
    if record is None:
        return "not checked"
    if record.get("undetermined"):
        return record["verdict"]
    return record["verdict"] if record["ok"] else f"**FAIL** {record['verdict']}"


def ratio_cell(ratio: float | None, record: dict | None) -> str:
    """A speed ratio, "invalid" for a variant whose losses failed parity, "unchecked" where parity could not
    be decided."""
    if record is not None and record.get("undetermined"):
        return "unchecked" if ratio is None else f"{ratio:.2f}x (parity unchecked)"
    if record is not None and not record["ok"]:
        return "invalid"
    return "-" if ratio is None else f"{ratio:.2f}x"


def check_all(
    runs: dict[str, dict],
    reference: str,
    uniform: float,
    skip: dict[str, str] | None = None,
    twin: list[float] | None = None,
) -> None:
    """Add `parity` to every run that recorded `losses` (the reference's own record checks only that it is
    not degenerate); runs named in `skip` get its reason instead (another model or other batches). Without
    the reference's losses the others are checked for degeneracy alone and say so. `twin`: a second run of
    the reference (`verdict`)."""
    ref = runs.get(reference, {}).get("losses")
    for name, r in runs.items():
        if "losses" not in r:
            continue
        if skip and name in skip:
            r["parity"] = {"ok": True, "verdict": f"not compared: {skip[name]}", "reference": reference}
            continue
        against = None if name == reference else ref
        record = verdict(r["losses"], against, uniform, kind_of(name, r), reference, twin)
        if name != reference and ref is None and record["ok"]:
            record["verdict"] = f"no reference losses ({reference} did not run): not degenerate only"
        r["parity"] = record


def uniform_loss(vocab_size: int) -> float:
    """A language model's loss on uniform logits."""
    return math.log(vocab_size)


def noise_band(reference: list[float], seeds: list[list[float]], window: int = SEED_WINDOW) -> list[float]:
    """At each step, the largest relative distance from the reference of its own model trained with another
    dropout seed (`seeds`: their curves), over the steps within `window` of it: the spread of equally valid
    runs, which a variant's distance is judged against."""
    n = min(len(reference), *(len(s) for s in seeds))
    spread = [
        max(abs(s[i] - reference[i]) / abs(reference[i]) if math.isfinite(s[i]) else math.inf for s in seeds)
        for i in range(n)
    ]
    return [max(spread[max(0, i - window) : i + window + 1]) for i in range(n)]


# the speed levers a curve variant may add to a mode (`lever_base`), config names
LEVERS = ("FP8_MLP_ACTIVATIONS", "FP8_FAST_ACCUM", "FP8_DPA")


def switched_on(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def lever_base(name: str, settings: dict[str, dict[str, str]]) -> str | None:
    """The curve among `settings` (each curve's overrides) that `name` is with fewer of its speed levers
    (`LEVERS`; ACL, the blocks FP8_MLP_ACTIVATIONS keeps, goes with it): the one keeping most of its
    settings, or None where none ran."""

    def plain(overrides: dict[str, str]) -> dict[str, str]:  # a lever switched off is no lever
        return {k: v for k, v in overrides.items() if k not in LEVERS or switched_on(v)}

    own = plain(settings[name])
    levers = [k for k in LEVERS if k in own]
    best, most = None, -1
    for drop in range(1, 1 << len(levers)):
        gone = {k for i, k in enumerate(levers) if drop >> i & 1}
        if "FP8_MLP_ACTIVATIONS" in gone:
            gone.add("ACL")
        kept = {k: v for k, v in own.items() if k not in gone}
        for other, theirs in settings.items():
            if other != name and plain(theirs) == kept and len(kept) > most:
                best, most = other, len(kept)
    return best


def curve_verdicts(
    curves: dict[str, list[float]],
    reference: str,
    uniform: float,
    fp8_from: int,
    control: str | None = None,
    seeds: tuple[str, ...] = (),
    settings: dict[str, dict[str, str]] | None = None,
) -> dict:
    """Each curve's `verdict` against the reference curve's (FP8 curves from step `fp8_from`; beside the
    `control` curve, a bf16 run judged by the plain tolerance itself; against the spread of the `seeds`
    curves, the reference's model with other dropout seeds, where any ran), with what the curves' table
    shows besides: the largest deviation over the compared steps and the mean over the last 10, the first and
    last loss, whether the first is that of uniform logits. `settings`: each curve's config overrides, which
    say its FP8 (else its name does) and the lever a curve adds to another (`lever_base`)."""
    ref = curves[reference]
    beside = curves[control] if control else None
    noise = noise_band(ref, [curves[s] for s in seeds]) if seeds else None
    out = {}
    settings = settings or {}
    for name, losses in curves.items():
        asked = settings.get(name)
        fp8 = asked is not None and (asked.get("PRECISION") == "fp8" or switched_on(asked.get("FP8", "")))
        kind = kind_of(name, None if asked is None else {"fp8_matmuls": fp8})
        start = fp8_from if kind == "fp8" else 0
        against = None if name in (reference, *seeds) else ref
        record = verdict(
            losses,
            against,
            uniform,
            kind,
            reference,
            from_step=start,
            control=None if name in (reference, control) else beside,
            noise=None if name in seeds else noise,
        )
        deviations = [abs(a - b) / abs(b) for a, b in zip(losses, ref)]
        if name in seeds:
            record.update(
                seed=True,
                max_rel_dev=max(deviations[start:], default=0.0),
                verdict="noise: the reference's model with another dropout seed",
            )
        ran = {k: v for k, v in settings.items() if k in curves and k not in seeds}
        judged = noise is not None and name not in seeds and name in ran
        base = lever_base(name, ran) if judged else None
        if base:  # the lever alone: what it changes of the mode it is added to, against the same noise
            record["lever"] = verdict(losses, curves[base], uniform, kind, base, from_step=start, noise=noise)
        out[name] = {
            **record,
            "max_rel_dev": record.get("max_rel_dev", 0.0),
            "from_step": start,
            "mean_rel_dev_last10": sum(deviations[-10:]) / len(deviations[-10:]),
            "first": losses[0],
            "last": losses[-1],
            "degenerate": abs(losses[0] - uniform) < UNIFORM,
        }
    return out
