"""MLPerf Training v6.0's own configs, as published (tests/data/mlperf_results/v6.0): AMD's Primus LoRA and
8B configs (and Oracle's MI355X copy of the LoRA one) go through the launcher's config stage and the trainer's
config with every name honored or named, and the hyperparameters our trainer would log for each equal what
AMD's MI355X result_0.txt logged. NVIDIA's NeMo 26.04 configs source `config_common*.sh` files that the public
copy lacks: their own names are checked against the vocabulary."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.launch.helpers import REPO
from tests.launch.test_published_configs import STAGE, known, logged_by_us, same, trainer_config

V6 = REPO / "tests" / "data" / "mlperf_results" / "v6.0"
LORA, EIGHT_B = "benchmarks/llama2_70b_lora/implementations", "benchmarks/llama31_8b/implementations"


def _primus() -> list[tuple[str, str]]:
    """The Primus configs of AMD and its partners: whole files (they source nothing), sorted."""
    found = []
    for path in sorted(V6.glob("*/benchmarks/*/implementations/**/config_*.sh")):
        text = path.read_text()
        if "PRIMUS_PATH" in text and not re.search(r"^\s*(source|\.)\s", text, re.M):
            found.append((path.relative_to(V6).parts[2], str(path.relative_to(V6))))
    return found


PRIMUS = _primus()
# the MI355X results name config_MI355X_1x8x1.sh (Oracle's copy of AMD's LoRA config; AMD's 8B)
RESULTS = "AMD/results/MI355X_EPYC_9575F_primus"
ORACLE_LORA = f"Oracle/{LORA}/8xMI355X_2xEPYC_9575F/config_MI355X_1x8x1.sh"
AMD_8B = f"AMD/{EIGHT_B}/MI355X_EPYC_9575F_primus/config_MI355X_1x8x1.sh"
RESULT = {
    ORACLE_LORA: f"{RESULTS}/llama2_70b_lora/result_0.header.txt",
    AMD_8B: f"{RESULTS}/llama31_8b/result_0.header.txt",
}


def _configs() -> list[tuple[str, str]]:
    """Every LoRA and 8B config file of the copy (tests/data/mlperf_results/v6.0/README.md)."""
    found = []
    for path in sorted(V6.glob("*/benchmarks/*/implementations/**/config_*.sh")):
        bench = path.relative_to(V6).parts[2]
        if bench in ("llama2_70b_lora", "llama31_8b") and not path.name.startswith("config_common"):
            found.append((bench, str(path.relative_to(V6))))
    return found


ALL = _configs()
# Logged by AMD but not compared: the data's rows (LoRA) and the disclosure keys, which the run logs as built
NOT_COMPARED = {"train_samples", "eval_samples", "micro_batch_size", "tensor_parallelism"}


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    out = tmp_path_factory.mktemp("staged_v6")
    (out / "data").mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(out),
        "DATADIR": str(out / "data"),
        "LOGDIR": str(out / "logs"),
        "LOGDIR_MB_PER_RUN": "0",
        "CONTAINER_RUNTIME": "none",
        "PYTHON": sys.executable,
        "MASTER_ADDR": "node0",  # AMD's multi-node configs need it before they are sourced
    }
    configs = [str(V6 / path) for _, path in PRIMUS]
    subprocess.run(
        ["bash", "-c", STAGE, "stage", str(REPO), str(out), *configs], env=env, check=True, timeout=300
    )
    return out


def header(path: str) -> dict:
    values = {}
    for line in (V6 / path).read_text().splitlines():
        if ":::MLLOG" in line:
            record = json.loads(line.split(":::MLLOG", 1)[1])
            values.setdefault(record["key"], record["value"])
    return values


@pytest.mark.parametrize("bench, path", PRIMUS, ids=lambda v: "/".join(v.split("/")[::4]) if "/" in v else v)
def test_primus_config_runs_with_amds_hyperparameters(staged, bench, path):
    i = PRIMUS.index((bench, path)) + 1
    assert (staged / f"{i}.rc").read_text().strip() == "0", (staged / f"{i}.out").read_text()
    raw = (staged / f"{i}.env").read_bytes().decode().split("\0")
    env = dict(item.split("=", 1) for item in raw if "=" in item)
    assert env["BENCHMARK"] == bench and env["DGXNGPU"] == "8"
    world = int(env["DGXNNODES"]) * 8
    assert [n for n in env["CONFIG_VARS"].split() if not known(bench, n)] == []
    cfg, problems = trainer_config(bench, env)
    assert cfg is not None and problems == [], problems
    # FP4=True asks for MXFP4: what runs instead is said
    if env.get("FP4", "").lower() == "true":  # what runs for a 4-bit recipe is said
        assert any(line.startswith("FP4=True") for line in cfg.substitutions(world))
    if path not in RESULT:
        return
    theirs = header(RESULT[path])
    ours, _ = logged_by_us(bench, cfg, world)
    compared = [k for k in theirs if k in ours and k not in NOT_COMPARED]
    assert {"global_batch_size", "opt_base_learning_rate", "opt_adamw_epsilon"} <= set(compared)
    differ = {k: (ours[k], theirs[k]) for k in compared if not same(ours[k], theirs[k])}
    assert differ == {}
    assert cfg.micro_batch_size == theirs["micro_batch_size"]


@pytest.mark.parametrize("bench, path", ALL, ids=lambda v: v.split("/")[-1] if "/" in v else v)
def test_every_name_of_a_v60_config_is_known(bench, path):
    """The files they source (NVIDIA's config_common*.sh, mostly missing from the copy) aside."""
    names = re.findall(r"^\s*export\s+([A-Z_][A-Z0-9_]*)=", (V6 / path).read_text(), re.M)
    assert names and [n for n in names if not known(bench, n)] == []


def test_the_copy_holds_the_configs_of_the_round():
    assert len(ALL) >= 70 and len(PRIMUS) >= 14 and set(RESULT) <= {p for _, p in PRIMUS}
