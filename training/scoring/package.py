"""The MLCommons submission tree of a folder of runs, judged by mlperf-logging's own package checker.

    python -m training.scoring LOGDIR --package OUTDIR

    OUTDIR/<submitter>/results/<system>/<benchmark>/result_<i>.txt   each run's log, in run order
    OUTDIR/<submitter>/systems/<system>.json                           the system description
    OUTDIR/<submitter>/benchmarks/<benchmark>/implementations/pytorch/README.md   the code pointer
    OUTDIR/package_checker.log                                         the checker's messages

The system description comes from the runs' effective configs (LOGDIR/<tag>.config.json: nodes, GPUs, the
accelerator, versions, the git commit), then from their logs' submission_* lines, and for the host from the
doctor's report of this machine; what neither can tell (cooling, networking, ...) is left empty and listed
for the submitter to fill in. The tree is built beside OUTDIR and renamed into place: OUTDIR ends up whole
or untouched, and one that holds anything is refused.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import warnings
from pathlib import Path

from mlperf_logging.compliance_checker import mlp_compliance
from mlperf_logging.package_checker import package_checker

from .checkers import captured_root_log
from .runs import read_run

# The fields mlperf_logging's system_desc_checker requires, in its order.
SYSTEM_FIELDS = (
    "submitter",
    "division",
    "status",
    "system_name",
    "number_of_nodes",
    "host_processors_per_node",
    "host_processor_model_name",
    "host_processor_core_count",
    "host_processor_vcpu_count",
    "host_processor_frequency",
    "host_processor_caches",
    "host_processor_interconnect",
    "host_memory_capacity",
    "host_storage_type",
    "host_storage_capacity",
    "host_networking",
    "host_networking_topology",
    "host_memory_configuration",
    "accelerators_per_node",
    "accelerator_model_name",
    "accelerator_host_interconnect",
    "accelerator_frequency",
    "accelerator_on-chip_memories",
    "accelerator_memory_configuration",
    "accelerator_memory_capacity",
    "accelerator_interconnect",
    "accelerator_interconnect_topology",
    "cooling",
    "hw_notes",
    "framework",
    "other_software_stack",
    "operating_system",
    "sw_notes",
)
# MLPerf logs' submission_status -> the system description's availability (the checker's allowed values)
AVAILABILITY = {
    "onprem": "Available on-premise",
    "cloud": "Available cloud",
    "research": "Research, Development, or Internal (RDI)",
    "preview": "Preview",
}
PASSED = "PACKAGE CHECKER FOUND NO ERRORS"
# the RCP checker's "Submission mean epochs: nan", said in words
NO_MEAN = "INFO -  Submission mean epochs: none (no run counts toward the RCP check's mean)"


def refuse_nonempty(out: Path) -> None:
    """Nothing written is lost: a package goes only where there is nothing yet."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} is not empty: refusing to write a package over what it holds")


def _folder_name(value: str) -> str:
    """`value` as one folder name of the tree (no separators, no leading dot)."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", value).lstrip(".") or "unknown"


def _effective_config(log: Path) -> dict:
    path = log.with_name(f"{log.stem}.config.json")
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not an effective config ({err})") from None


def system_description(logs: list[Path], doctor: dict[str, str]) -> dict[str, str]:
    """The system description of the runs in `logs`, every field the checker requires present ("" where
    nothing here knows it)."""
    effective = next((c for c in map(_effective_config, logs) if c), {})
    config, versions = effective.get("config", {}), effective.get("versions", {})
    submission = next((r.submission for r in map(read_run, logs) if r.submission), {})
    gpu = doctor.get("gpu 0", "")
    framework = f"PyTorch {versions.get('torch') or doctor.get('torch', '')}"
    framework += "".join(f", {name.upper()} {versions[name]}" for name in ("hip", "cuda") if name in versions)
    stack = ", ".join(f"{name} {v}" for name, v in versions.items() if name not in ("torch", "hip", "cuda"))
    desc = dict.fromkeys(SYSTEM_FIELDS, "")
    desc.update(
        {
            "submitter": str(config.get("MLPERF_SUBMISSION_ORG") or submission.get("org") or "unknown"),
            "division": submission.get("division", "closed"),
            "status": AVAILABILITY.get(submission.get("status", "onprem"), submission.get("status", "")),
            "system_name": str(config.get("DGXSYSTEM") or submission.get("platform") or "unknown"),
            "number_of_nodes": str(config.get("DGXNNODES", "")),
            "accelerators_per_node": str(config.get("DGXNGPU", doctor.get("gpus", ""))),
            "accelerator_model_name": effective.get("accelerator") or gpu.split(",")[0],
            "accelerator_memory_capacity": gpu.split(", ", 1)[1] if ", " in gpu else "",
            "host_processor_model_name": doctor.get("cpu", ""),
            "host_processor_vcpu_count": doctor.get("logical cpus", ""),
            "host_memory_capacity": doctor.get("memory", ""),
            "operating_system": doctor.get("os", ""),
            "framework": framework,
            "other_software_stack": stack,
            "sw_notes": f"mlperf-repro at commit {effective.get('git_commit', 'unknown')}",
        }
    )
    return desc


def write_package(logdir: Path, summary: dict, out: Path, doctor: dict[str, str]) -> tuple[Path, list[str]]:
    """Write the submission tree of the summary's runs into `out`; returns the submitter's folder (what the
    package checker reads) and the system-description fields left for the submitter to fill in."""
    out = Path(out)
    refuse_nonempty(out)
    logs = [Path(logdir) / row["log"] for row in summary["runs"]]
    desc = system_description(logs, doctor)
    submitter, system = (_folder_name(desc[k]) for k in ("submitter", "system_name"))
    benchmark = summary["benchmark"]
    tmp = out.parent / f".{out.name}.{os.getpid()}.tmp"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        results = tmp / submitter / "results" / system / benchmark
        results.mkdir(parents=True)
        for i, log in enumerate(logs):
            shutil.copyfile(log, results / f"result_{i}.txt")
        (tmp / submitter / "systems").mkdir()
        (tmp / submitter / "systems" / f"{system}.json").write_text(json.dumps(desc, indent=2) + "\n")
        code = tmp / submitter / "benchmarks" / benchmark / "implementations" / "pytorch"
        code.mkdir(parents=True)
        (code / "README.md").write_text(
            f"# {benchmark}: the code of these results\n\n"
            f"mlperf-repro (this toolkit), {desc['sw_notes'].removeprefix('mlperf-repro ')}.\n"
            f"Each run: `bash run_with_docker.sh` with configs/{benchmark}/config_{system}.sh sourced, which "
            "runs training/run_and_time.sh in the container.\n"
        )
        os.replace(tmp, out)  # onto a missing or empty folder
    except OSError as err:
        raise OSError(f"could not write the package to {out}: {err}") from err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / submitter, [name for name, value in desc.items() if value == ""]


def why_rejected(summary: dict) -> str:
    """Why MLCommons' package checker cannot accept the summary's runs whatever the package holds (a demo's
    target, too few runs), in words; "" when nothing is known against them."""
    reasons = []
    demo = sorted({r["target_accuracy"] for r in summary["runs"]} - {summary["official_target"], None})
    if demo:
        reasons.append(
            f"the runs are demos (target_accuracy {', '.join(map(str, demo))}, not "
            f"{summary['benchmark']}'s {summary['official_target']}): the compliance rules fail "
            "their evaluations, and the RCP check finds no run at MLPerf's target"
        )
    if len(summary["runs"]) != summary["required_runs"]:
        reasons.append(
            f"{len(summary['runs'])} run(s), where a submission has exactly {summary['required_runs']}"
        )
    return "; ".join(reasons)


def check_package(root: Path, ruleset: str) -> tuple[bool, list[str]]:
    """mlperf_logging's package checker on the submitter folder `root`, as `python -m
    mlperf_logging.package_checker ROOT training RULESET` runs it: (accepted, its messages)."""
    mlp_compliance.enqueued_configs.clear()  # as compliance.py: a module-level queue, empty before and after
    printed = io.StringIO()
    # numpy's warnings (the mean of no run) are the RCP checker's, not the user's: its own lines say it
    with captured_root_log() as lines, contextlib.redirect_stdout(printed), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            package_checker.check_training_package(
                str(root),
                "training",
                ruleset,
                quiet=False,
                werror=False,
                rcp_bypass=False,
                rcp_bert_train_samples=False,
                seed_checker_bypass=False,
                log_output="(captured)",
            )
        except Exception as err:  # noqa: BLE001 - a checker that raises rejects the package
            lines.append(f"ERROR - package checker error: {type(err).__name__}: {err}")
        finally:
            mlp_compliance.enqueued_configs.clear()
    lines += [line for line in printed.getvalue().splitlines() if line.strip() and "(captured)" not in line]
    lines = [NO_MEAN if line.rstrip().endswith("mean epochs: nan") else line for line in lines]
    return any(PASSED in line for line in lines), lines
