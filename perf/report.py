"""The measured tables of `perf/RESULTS.md` and `README.md`, generated from the benches' JSON in
`perf/results/`.

    python -m perf.report           # rewrite each table between its marker comments
    python -m perf.report --check   # exit 1, naming the file and table, where one differs from the JSON's

A speed row is a claim only where its JSON holds both figures of one call (the variant and its peer in the
same file) and the variant's own loss-parity verdict passed (`perf/lib/parity.py`: compared with its
reference's losses, within tolerance), and the peer's verdict, where it was compared, passed too. Every other
row is listed apart with the reason. Every figure comes from the JSON as the bench wrote it; what this module
says is which measurements are the current ones (`HEADLINE`) and what to call them. The curve-parity and
convergence tables list every `curve_*.json` and `convergence_*.json` under `perf/results/`.

Only the standard library: this runs in CI, where the tables are checked (`tests/test_perf_report.py`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "perf" / "results"


@dataclass(frozen=True)
class Pick:
    """One headline row: a variant of one bench call and the peer it is measured against in that call."""

    what: str  # the benchmark and mode, in words
    source: str  # the bench's JSON, relative to perf/results/
    variant: str  # its key in the JSON's `runs`
    peer: str  # the peer's key in the same `runs`
    peer_name: str  # the peer, in words
    readme: bool = False  # also in README's table (the headline figures a user needs), where it is a claim


DAY, DAY2, DAY3, DAY4 = "2026-11-27", "2026-11-28", "2026-12-04", "2026-12-06"
LORA, LLAMA, SUITE = "Llama 2 70B LoRA step", "Llama 3.1 8B", "Throughput suite, Llama 3.1 8B"
PEFT, TITAN = "HF + `peft`", "torchtitan 0.2.2"
HEADLINE = (
    Pick(
        "BERT-Large step, native FP8, CUDA graphs, bf16 residual (the H100 config's mode)",
        f"{DAY}/bench_bert_h100_fastest_parity.json",
        "compiled_fp8native_cudagraphs_bf16res",
        "hf",
        "HF `BertForPreTraining`",
        readme=True,
    ),
    Pick(
        "BERT-Large step, native FP8, CUDA graphs, bf16 residual (the H100 config's mode)",
        f"{DAY3}/bench_bert_h200_fastest_parity.json",
        "compiled_fp8native_cudagraphs_bf16res",
        "hf",
        "HF `BertForPreTraining`",
    ),
    Pick(
        f"{LLAMA}, the trainer's step at GBS 16 (4 micro-batches a GPU, a reduce-scatter after each), "
        "full depth, native FP8",
        f"{DAY}/bench_llama_32blocks_4xh100_gbs16_flash4_profile.json",
        "ours-fp8native-synceach-flash4",
        "ours-bf16-synceach",
        "ours, bf16, compiled",
        readme=True,
    ),
    Pick(
        f"{LLAMA}, the trainer's step at GBS 16 (4 micro-batches a GPU, a reduce-scatter after each), "
        "full depth, native FP8",
        f"{DAY}/bench_llama_32blocks_4xh100_gbs16_flash4_profile.json",
        "ours-fp8native-synceach",
        "ours-bf16-synceach",
        "ours, bf16, compiled",
    ),
    Pick(
        f"{LLAMA}, the trainer's step at GBS 16 (a reduce-scatter after each micro-batch), native FP8, the "
        "gradients reduce-scattered in bf16 (`GRAD_REDUCE_IN_FP32=0`)",
        f"{DAY2}/bench_llama_accum_4xh200_bf16reduce_flash4.json",
        "ours-fp8native-synceach-flash4-bf16reduce",
        "ours-fp8native-synceach-flash4",
        "ours, the same, float32 reduce-scatter",
        readme=True,
    ),
    Pick(
        f"{LLAMA}, the trainer's step at GBS 16 (a reduce-scatter after each micro-batch), native FP8, the "
        "gradients reduce-scattered in bf16 (`GRAD_REDUCE_IN_FP32=0`)",
        f"{DAY2}/bench_llama_accum_4xh200_bf16reduce_sdpa.json",
        "ours-fp8native-synceach-bf16reduce",
        "ours-fp8native-synceach",
        "ours, the same, float32 reduce-scatter",
    ),
    Pick(
        f"{LLAMA}, one micro-batch a step, full depth, native FP8, blocks kept gathered",
        f"{DAY}/bench_llama_32blocks_4xh200_keep.json",
        "ours-fp8native-keep",
        "ours-bf16-eager-torchadamw",
        "ours, bf16, eager",
    ),
    Pick(
        f"{LLAMA} width, 6 blocks, bf16, compiled",
        f"{DAY}/bench_llama_6blocks_constlr.json",
        "ours-bf16",
        "hf-bf16",
        "HF `LlamaForCausalLM`",
    ),
    Pick(
        f"{LLAMA} width, 6 blocks, native FP8",
        f"{DAY}/bench_llama_6blocks_constlr.json",
        "ours-fp8native",
        "hf-bf16",
        "HF `LlamaForCausalLM`",
    ),
    Pick(
        f"{SUITE}, full depth, bf16",
        f"{DAY}/bench_throughput_32blocks_4xh200_sixth.json",
        "llama8b-bf16:ours",
        "llama8b-bf16:titan",
        TITAN,
        readme=True,
    ),
    Pick(
        f"{SUITE}, full depth, FP8, a 50-step learning-rate warm-up",
        f"{DAY}/bench_throughput_32blocks_4xh200_fp8_lrwarmup50.json",
        "llama8b-fp8:ours",
        "llama8b-fp8:titan",
        f"{TITAN} + torchao",
    ),
    Pick(
        f"{SUITE}, full depth, FP8, a 50-step learning-rate warm-up",
        f"{DAY}/bench_throughput_32blocks_4xh200_fp8_flash4_lrwarmup50.json",
        "llama8b-fp8:ours-flash4",
        "llama8b-fp8:titan",
        f"{TITAN} + torchao",
        readme=True,
    ),
    Pick(
        f"{SUITE}, full depth, FP8, a 50-step learning-rate warm-up",
        f"{DAY}/bench_throughput_32blocks_4xh100_fp8_flash4_lrwarmup50_profile.json",
        "llama8b-fp8:ours",
        "llama8b-fp8:titan",
        f"{TITAN} + torchao",
        readme=True,
    ),
    Pick(
        f"{SUITE}, full depth, our step with torchao's float8",
        f"{DAY}/bench_throughput_32blocks_4xh200_fp8_lrwarmup50.json",
        "llama8b-fp8:ours-torchao",
        "llama8b-fp8:titan",
        f"{TITAN} + torchao",
    ),
    Pick(
        f"{SUITE}, full depth, FP8, a 10-step learning-rate warm-up",
        f"{DAY}/bench_throughput_32blocks_4xh200_sixth.json",
        "llama8b-fp8:ours",
        "llama8b-fp8:titan",
        f"{TITAN} + torchao",
    ),
    Pick(
        f"{SUITE}, full depth, FP8, 2 rows a GPU",
        f"{DAY}/bench_throughput_32blocks_4xh200_fp8_mbs2.json",
        "llama8b-fp8:ours",
        "llama8b-fp8:titan",
        f"{TITAN} + torchao",
    ),
    Pick(
        f"{SUITE}, 24 blocks, bf16, a 50-step learning-rate warm-up",
        f"{DAY}/bench_throughput_24blocks_h200_lrwarmup50_profile.json",
        "llama8b-bf16:ours-flash4",
        "llama8b-bf16:titan",
        TITAN,
    ),
    Pick(
        f"{SUITE}, 24 blocks, FP8, a 50-step learning-rate warm-up",
        f"{DAY}/bench_throughput_24blocks_h200_lrwarmup50_profile.json",
        "llama8b-fp8:ours-flash4",
        "llama8b-fp8:titan",
        f"{TITAN} + torchao",
        readme=True,
    ),
    Pick(
        f"{LORA}, 20 of 80 blocks, bf16, every block recomputed",
        f"{DAY}/bench_lora_20blocks.json",
        "ours-bf16-ac",
        "peft-bf16-ac",
        PEFT,
        readme=True,
    ),
    Pick(
        f"{LORA}, 20 of 80 blocks, native FP8, every block recomputed",
        f"{DAY}/bench_lora_20blocks.json",
        "ours-fp8native-ac",
        "peft-bf16-ac",
        PEFT,
    ),
    Pick(
        f"{LORA}, 20 of 80 blocks, native FP8, frozen weights stored in FP8, every block recomputed",
        f"{DAY}/bench_lora_20blocks.json",
        "ours-fp8native-fp8w-ac",
        "peft-bf16-ac",
        PEFT,
    ),
    Pick(
        f"{LORA}, 20 of 80 blocks, bf16, a new excerpt row each step, constant learning rate",
        f"{DAY}/bench_lora_20blocks_stream_constlr.json",
        "ours-bf16-ac",
        "peft-bf16-ac",
        PEFT,
    ),
    Pick(
        f"{LORA}, 40 of 80 blocks, native FP8, every block recomputed (the peer's recompute)",
        f"{DAY}/bench_lora_40blocks_h200_flash4_profile.json",
        "ours-fp8native-ac",
        "peft-bf16-ac",
        PEFT,
        readme=True,
    ),
    Pick(
        f"{LORA}, 40 of 80 blocks, native FP8, every block recomputed",
        f"{DAY}/bench_lora_40blocks_h200_fp8w.json",
        "ours-fp8native-ac",
        "peft-bf16-ac",
        PEFT,
    ),
    Pick(
        f"{LORA}, 40 of 80 blocks, native FP8, frozen weights stored in FP8 (`FP8_WEIGHTS=1`), every block "
        "recomputed",
        f"{DAY}/bench_lora_40blocks_h200_fp8w.json",
        "ours-fp8native-fp8w-ac",
        "peft-bf16-ac",
        PEFT,
    ),
    Pick(
        f"{LORA}, all 80 blocks on ONE GPU, frozen weights stored in FP8, 40 blocks recomputed (ACL 40)",
        f"{DAY2}/bench_lora_80blocks_1xh200_fp8w_acl_sdpa.json",
        "ours-fp8native-fp8w-ac40",
        "ours-fp8native-fp8w-ac",
        "ours, every block recomputed",
    ),
    Pick(
        f"{LORA}, all 80 blocks on ONE GPU, frozen weights stored in FP8, the kept blocks' SwiGLU inputs in "
        "FP8 (`FP8_MLP_ACTIVATIONS=1`), 24 blocks recomputed (ACL 24): the one-H200 config's mode",
        f"{DAY3}/bench_lora_80blocks_1xh200_fp8w_fp8act_sdpa.json",
        "ours-fp8native-fp8w-fp8act-ac24-sdpa",
        "ours-fp8native-fp8w-ac40-sdpa",
        "ours, bf16 SwiGLU inputs, ACL 40",
        readme=True,
    ),
    Pick(
        f"{LORA}, all 80 blocks on ONE GPU, as the row above with fast accumulation (`FP8_FAST_ACCUM=1`; "
        "not shipped: its curve parts from FP8's farther than other dropout seeds)",
        f"{DAY3}/bench_lora_80blocks_1xh200_fp8w_fp8act_sdpa.json",
        "ours-fp8native-fp8w-fastaccum-fp8act-ac24-sdpa",
        "ours-fp8native-fp8w-ac40-sdpa",
        "ours, bf16 SwiGLU inputs, ACL 40",
    ),
    Pick(
        f"{LORA}, 24 of 80 blocks in the one-H200 config's mode, 12 blocks' saved activations in host memory "
        "(`ACTIVATION_OFFLOAD_LAYERS=12`) instead of recomputed; 4 recomputed, 8 kept",
        f"{DAY4}/bench_lora_24blocks_h100_offload.json",
        "offload12",
        "recompute16",
        "ours, the same 12 recomputed (ACL 16)",
    ),
    Pick(
        f"{LORA}, all 80 blocks, FSDP2, native FP8, 24 blocks recomputed (ACL 24)",
        f"{DAY}/bench_lora_80blocks_4xh200_peft_ac24_flash4.json",
        "ours-fp8native-ac24",
        "peft-bf16-ac",
        f"{PEFT}, FSDP2",
        readme=True,
    ),
    Pick(
        f"{LORA}, all 80 blocks, FSDP2, native FP8, 24 blocks recomputed (ACL 24)",
        f"{DAY}/bench_lora_80blocks_4xh200_peft_ac24.json",
        "ours-fp8native-ac24",
        "peft-bf16-ac",
        f"{PEFT}, FSDP2",
    ),
    Pick(
        f"{LORA}, all 80 blocks, FSDP2, native FP8, every block recomputed, a 50-step learning-rate warm-up",
        f"{DAY}/bench_lora_80blocks_4xh100_lrwarmup50.json",
        "ours-fp8native-ac",
        "peft-bf16-ac",
        f"{PEFT}, FSDP2",
        readme=True,
    ),
    Pick(
        f"{LORA}, all 80 blocks, FSDP2, bf16, every block recomputed, a 50-step learning-rate warm-up",
        f"{DAY}/bench_lora_80blocks_4xh100_lrwarmup50.json",
        "ours-bf16-ac",
        "peft-bf16-ac",
        f"{PEFT}, FSDP2",
    ),
    Pick(
        f"{LORA}, all 80 blocks, FSDP2, native FP8, every block recomputed, the bench's 5-step warm-up",
        f"{DAY}/bench_lora_80blocks_4xh100_profiled.json",
        "ours-fp8native-ac",
        "peft-bf16-ac",
        f"{PEFT}, FSDP2",
    ),
)


@dataclass(frozen=True)
class Row:
    pick: Pick
    machine: str
    unit: str
    ours: float | None
    peer: float | None
    parity: str  # the variant's verdict, against its reference
    attention: str  # as the run recorded it ("" where it did not)
    problem: str  # why the row is not a claim ("" for a claim)

    @property
    def ratio(self) -> str:
        return f"{self.ours / self.peer:.2f}x" if self.ours and self.peer else "-"


def short_gpu(device: str) -> str:
    found = re.search(r"\b(H100|H200|H20|B200|B300|GB200|A100|MI\d{3}X?)\b", device)
    return found.group(1) if found else device


def speed(run: dict, gpus: int) -> tuple[float | None, str]:
    """The run's throughput and its unit, from whichever key its bench writes."""
    per_gpu = "tokens/s/GPU" if gpus > 1 else "tokens/s"
    if "tokens_per_s_per_gpu" in run:
        return run["tokens_per_s_per_gpu"], per_gpu
    if "tokens_per_s" in run:  # bench_lora: the slowest rank's rate, one sequence per GPU
        return run["tokens_per_s"], per_gpu
    if "samples_per_s" in run:
        return run["samples_per_s"], "samples/s"
    return None, ""


def attention_of(run: dict, data: dict) -> str:
    recorded = run.get("attention") or (run.get("backends") or {}).get("attention")
    if recorded:
        return str(recorded)
    version = (data.get("versions") or {}).get("flash_attn_4")
    return f"not recorded; flash-attn-4 {version} importable (`auto` picks it)" if version else ""


# The parity references of the claim rows recorded before a bench variant was its config plus overrides, as
# config settings (blocks compiled on GPUs then unless the name said `eager`); a row recorded since names its
# reference's settings itself (`overrides`, and `model` for a peer's).
EARLIER_REFERENCES = {
    "ours-bf16-eager-torchadamw": "ours, `COMPILE=0 ATTENTION=sdpa ADAMW_IMPL=torch`",
    "ours-bf16-synceach": "ours, `COMPILE=1 ATTENTION=sdpa REDUCE_EACH_MICRO_BATCH=1`",
    "ours-fp8native-synceach-flash4": "ours, `COMPILE=1 ATTENTION=flash4 REDUCE_EACH_MICRO_BATCH=1 "
    "PRECISION=fp8 FP8_BACKEND=native`",
    "ours-bf16-ac-eager-torchdropout-sdpa": "ours, `COMPILE=0 ACTIVATION_CHECKPOINTING=1 LORA_KERNEL=pytorch "
    "ATTENTION=sdpa`",
    "ours-fp8native-fp8w-ac40-sdpa": "ours, `COMPILE=1 ACTIVATION_CHECKPOINTING=1 ACL=40 ATTENTION=sdpa "
    "PRECISION=fp8 FP8_BACKEND=native FP8_WEIGHTS=1`",
    "peft-bf16-ac": f"{PEFT}, `ACTIVATION_CHECKPOINTING=1`",
}
MODELS = {"ours": "ours", "hf": "HF", "peft": PEFT}


def reference_words(name: str, runs: dict) -> str:
    """A parity reference in config settings: its run's recorded overrides, else an earlier name's
    (`EARLIER_REFERENCES`), else its name as recorded."""
    run = runs.get(name) or {}
    if "overrides" in run:
        words = " ".join(f"{k}={v}" for k, v in run["overrides"].items())
        model = MODELS.get(run.get("model", "ours"), run.get("model"))
        return f"{model}, `{words}`" if words else f"{model}, the config's defaults"
    return EARLIER_REFERENCES.get(name, f"`{name}`")


def compared_and_passed(parity: dict | None) -> bool:
    """A verdict of a variant compared with its reference's losses and within tolerance (not the reference's
    own record, not "not compared", not "undetermined")."""
    return bool(parity) and parity.get("ok") is True and "max_rel_dev" in parity


def peer_failed(parity: dict | None) -> bool:
    """The peer was compared with the reference and failed (a peer not compared, or the reference: not)."""
    return bool(parity) and parity.get("ok") is False


def evaluate(pick: Pick, data: dict) -> Row:
    runs = data.get("runs", {})
    run, peer = runs.get(pick.variant), runs.get(pick.peer)
    if run is None:
        raise ValueError(f"{pick.source}: no run {pick.variant!r} (runs: {', '.join(runs)})")
    gpus = int(data.get("gpus") or data.get("world_size") or run.get("world_size") or 1)
    device = data.get("device") or data.get("gpu") or "?"
    machine = f"{gpus} x {short_gpu(device)}"
    ours, unit = speed(run, gpus)
    theirs = speed(peer, gpus)[0] if peer else None
    parity = run.get("parity")
    verdict = parity.get("verdict", "") if parity else "no loss-parity verdict recorded"
    if parity and parity.get("reference") and compared_and_passed(parity):
        verdict += f", against {reference_words(parity['reference'], runs)}"
    if ours is None:
        problem = f"did not run: {run.get('error') or run.get('skipped') or 'no speed recorded'}"[:160]
    elif theirs is None:
        problem = "no peer in the same call" + (f" (`{pick.peer}` did not run)" if peer else "")
    elif not compared_and_passed(parity):
        problem = f"loss parity: {verdict}" if parity else "no loss-parity verdict"
    elif peer_failed(peer.get("parity")):
        problem = f"the peer's own loss parity: {peer['parity'].get('verdict')}"
    else:
        problem = ""
    return Row(pick, machine, unit, ours, theirs, verdict, attention_of(run, data), problem)


def headline_rows(results: Path = RESULTS) -> list[Row]:
    rows = []
    for pick in HEADLINE:
        path = results / pick.source
        if not path.is_file():
            raise ValueError(f"{path}: no such file (a HEADLINE row's source)")
        rows.append(evaluate(pick, json.loads(path.read_text())))
    return rows


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def what_cell(row: Row) -> str:
    return f"{row.pick.what}; attention: {row.attention}" if row.attention else row.pick.what


def source_cell(row: Row) -> str:
    return f"`perf/results/{row.pick.source}`"


def cells(r: Row) -> str:
    """The row's first three cells: what, ours, the peer."""
    return f"| {what_cell(r)} | {number(r.ours)} {r.unit} | {r.pick.peer_name}: {number(r.peer)} "


def claims_table(rows: list[Row]) -> list[str]:
    lines = [
        "| benchmark, mode | ours | peer, same call | ratio | loss parity | machine | source |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r.problem:
            lines.append(f"{cells(r)}| **{r.ratio}** | {r.parity} | {r.machine} | {source_cell(r)} |")
    return lines


def render_headline(rows: list[Row]) -> str:
    lines = ["**Claims**: the peer ran in the same call, and the variant's losses track its reference's.", ""]
    lines += claims_table(rows)
    lines += [
        "",
        "**Measured, not claims**: why is the last column; the ratio is shown, not claimed.",
        "",
        "| benchmark, mode | ours | peer, same call | ratio | machine | source | why not |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.problem:
            lines.append(f"{cells(r)}| {r.ratio} | {r.machine} | {source_cell(r)} | **{r.problem}** |")
    return "\n".join(lines)


def render_readme(rows: list[Row]) -> str:
    """The claims among the rows marked for README; a marked row that is not a claim is left out, and said."""
    marked = [r for r in rows if r.pick.readme]
    lines = claims_table(marked)
    if dropped := [r.pick.what for r in marked if r.problem]:
        lines += ["", "Not claims now (`perf/RESULTS.md` says why): " + "; ".join(dropped) + "."]
    return "\n".join(lines)


def curve_label(part: str, record: dict) -> str:
    """The part's name with what its record says of the run: depth, dropout, learning-rate warm-up."""
    facts = []
    depth = re.search(r"num_(?:hidden_)?layers=(\d+)", str(record.get("shape", "")))
    if depth and "blocks" not in part:
        facts.append(f"{depth.group(1)} blocks")
    if record.get("dropout") is not None:
        facts.append(f"dropout {record['dropout']}")
    if record.get("warmup_steps") is not None:
        facts.append(f"{record['warmup_steps']} warm-up steps")
    return f"{part} ({', '.join(facts)})" if facts else part


def render_curves(results: Path = RESULTS) -> str:
    """Every variant of every `curve_*.json`: its largest per-step deviation from the reference's curve."""
    lines = [
        "| part | reference | variant | max % off | mean % off, last 10 | tolerance | verdict | source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(results.glob("*/curve_*.json")):
        data = json.loads(path.read_text())
        for part, record in data["parts"].items():
            reference, label = record["reference"], curve_label(part, record)
            for variant, v in record["verdicts"].items():
                if variant == reference:
                    continue
                ok = "ok" if v.get("ok") else "**FAIL**"
                if v.get("degenerate"):
                    ok = "**FAIL** (degenerate)"
                if v.get("seed"):
                    ok = "noise: another dropout seed"
                if lever := v.get("lever"):
                    ok += f"; the lever against `{lever['reference']}`: " + (
                        "ok" if lever["ok"] else "**FAIL**"
                    )
                tolerance = (
                    "other seeds' spread"
                    if v.get("judge") == "seeds" or v.get("seed")
                    else (f"{100 * v['tolerance']:.0f}%")
                )
                lines.append(
                    f"| {label} | `{reference}` | `{variant}` | {100 * v['max_rel_dev']:.2f} | "
                    f"{100 * v['mean_rel_dev_last10']:.2f} | {tolerance} | {ok} | "
                    f"`perf/results/{path.relative_to(results).as_posix()}` |"
                )
    return "\n".join(lines)


def render_convergence(results: Path = RESULTS) -> str:
    """Every `convergence_*.json`: samples to target per seed, the reference mode against the config's."""
    lines = [
        "| benchmark | mode (its variables) | reference: samples to target | mode: samples to target | "
        "verdict | source |",
        "|---|---|---|---|---|---|",
    ]
    for path in sorted(results.glob("*/convergence_*.json")):
        data = json.loads(path.read_text())
        v = data["verdict"]
        mode = " ".join(f"{k}={val}" for k, val in sorted(data["mode"].items()))
        samples = [", ".join(str(s) for s in v[f"{side}_samples"]) for side in ("reference", "mode")]
        lines.append(
            f"| {data['benchmark']} | `{mode}` | {samples[0]} | {samples[1]} | "
            f"{'PASS' if v['ok'] else '**FAIL**'}: {v['verdict']} | "
            f"`perf/results/{path.relative_to(results).as_posix()}` |"
        )
    return "\n".join(lines)


def tables(results: Path = RESULTS) -> dict[str, dict[str, str]]:
    """file (relative to the repository) -> table name -> its generated text."""
    rows = headline_rows(results)
    return {
        "perf/RESULTS.md": {
            "headline": render_headline(rows),
            "curves": render_curves(results),
            "convergence": render_convergence(results),
        },
        "README.md": {"performance": render_readme(rows)},
    }


def markers(name: str) -> tuple[str, str]:
    return (
        f"<!-- perf.report {name}: generated from perf/results/ by `python -m perf.report` -->",
        f"<!-- perf.report {name}: end -->",
    )


def splice(text: str, name: str, table: str, where: str) -> str:
    """`text` with the lines between table `name`'s markers replaced by `table`."""
    begin, end = markers(name)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{where}: expected one pair of markers for the table {name!r}:\n{begin}\n{end}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{table}\n{end}{tail}"


def update(root: Path = ROOT, write: bool = True) -> list[str]:
    """Regenerate every table under `root` from `root`/perf/results/ (writing the files when `write`); returns
    "FILE: table NAME" for each table that was not what the JSON gives."""
    stale = []
    for name, generated in tables(root / "perf" / "results").items():
        path = root / name
        text = new = path.read_text()
        for table, content in generated.items():
            new = splice(new, table, content, name)
            if splice(text, table, content, name) != text:
                stale.append(f"{name}: table {table!r}")
        if write and new != text:
            path.write_text(new)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m perf.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a table differs")
    args = parser.parse_args(argv)
    try:
        stale = update(write=not args.check)
    except (OSError, ValueError, KeyError) as err:
        print(f"perf.report: error: {err}", file=sys.stderr)
        return 2
    if args.check and stale:
        print(
            "perf.report: not what perf/results/ gives (run python -m perf.report): " + "; ".join(stale),
            file=sys.stderr,
        )
        return 1
    for entry in stale:
        print(f"perf.report: wrote {entry}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
