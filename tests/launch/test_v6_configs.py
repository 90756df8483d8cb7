"""MLPerf Training v6.0's own configs, as published (tests/data/mlperf_results/v6.0): AMD's Primus LoRA and
8B configs (and Oracle's MI355X copy of the LoRA one) go through the launcher's config stage and the trainer's
config with every name honored or named, and the hyperparameters our trainer would log for each equal what
AMD's MI355X result_0.txt logged. NVIDIA's NeMo 26.04 configs source `config_common*.sh` files that the public
copy lacks: their own names are checked against the vocabulary."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.launch.helpers import REPO, stage_env
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
    # MASTER_ADDR: AMD's multi-node configs need it before they are sourced
    env = stage_env(out, MASTER_ADDR="node0")
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


# Each FP4 name of the v6.0 configs (and of NVIDIA's LoRA config_common_fp4.sh) and the setting it reaches
# here: a field of the trainer's config, or a vendor row saying why it is not applicable.
FP4_NAMES = {
    "FP4": "fp4",
    "FP4_RECIPE": "fp4_recipe",
    "HEALING_ITER": "healing_iter",
    "HEALING_PRECISION": "healing_precision",
    "WARMUP_RECIPE": "warmup_recipe",
    "NVTE_MXFP4_USE_HADAMARD": "mxfp4_use_hadamard",
    "NVTE_NVFP4_DISABLE_RHT": "nvfp4_disable_rht",
    "NVTE_NVFP4_DISABLE_2D_QUANTIZATION": "nvfp4_disable_2d",
    "NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING": "nvfp4_disable_sr",
    "FP8_DPA": "fp8_dpa",
    "SYNTH_WARMUP_STEPS": None,
    "PRE_QUANTIZED_MODEL": None,
    "FP4_PARAM": None,
    "FP4_PARAM_GATHER": None,
    "STORE_GPU": None,
    "FIRST_LAST_LAYERS_BF16": None,
    "RESET_CG_AFTER_HEALING": None,
    "NVTE_FP4_LOG_GEMM_SHAPES": None,
    "NVTE_DPA_FP8_RECIPE": None,
    "NVTE_DPA_FP8_FORMAT": None,
    "MLLOG_LOWEST_NUMERICAL_PRECISION_LINEAR": None,
    "AITER_CONFIG_GEMM_A4W4": None,
}
# NVIDIA's LoRA FP4 recipe, as its config_common_fp4.sh sets it (NeMo 26.04; the file is missing from the
# public copy: shared/reference/nvidia_reference_logging.md and v6_round.md give its lines), for the B200
# configs that source it; stochastic rounding stays on (its disabling line is commented out there)
NVIDIA_LORA_FP4 = """\
export FP4=True FP8=False FP8_PARAM_GATHER=0 FP4_PARAM_GATHER=0 FP4_RECIPE=nvfp4 FP4_PARAM=False
export NVTE_NVFP4_DISABLE_RHT=1 NVTE_NVFP4_DISABLE_2D_QUANTIZATION=1
export HEALING_PRECISION=FP8_DS PRE_QUANTIZED_MODEL=True
export NVTE_DPA_FP8_RECIPE=DelayedScaling NVTE_DPA_FP8_FORMAT=HYBRID
"""
DELL_B200_LORA = f"Dell/{LORA}/nemo/config_XE9780_8xB200_1x8x1xtp1pp1cp1_fp4.sh"
# NVIDIA's LoRA config_common.sh (FP8 with FP8 attention: FP8_DPA=1), as Fujitsu's v6.0 copy has it
NVIDIA_LORA_COMMON = f"Fujitsu/{LORA}/nemo/configs/config_common.sh"


def _fp4_names_reach_the_recipe(bench: str, env: dict[str, str], cfg) -> None:
    """Every FP4 name `env`'s config exported either set its config field or is not applicable, with why."""
    from training.common import vendor_vars

    exported = [n for n in env["CONFIG_VARS"].split() if n in FP4_NAMES]
    assert exported
    record = vendor_vars.translate(env, bench, exported)
    for name in exported:
        field = FP4_NAMES[name]
        row = vendor_vars.row(name, bench)
        if field is not None:
            assert getattr(cfg, field) is not None and row is None, name  # ours: read by the config
        else:
            assert row is not None and row.why, name
            assert row.kind != vendor_vars.NOT_APPLICABLE or record.not_applicable[name] == row.why
    assert not record.problems


def _staged_primus(staged, path: str):
    i = PRIMUS.index(("llama2_70b_lora" if LORA in path else "llama31_8b", path)) + 1
    raw = (staged / f"{i}.env").read_bytes().decode().split("\0")
    env = dict(item.split("=", 1) for item in raw if "=" in item)
    bench = env["BENCHMARK"]
    cfg, problems = trainer_config(bench, env)
    assert problems == []
    return bench, env, cfg


def test_amds_lora_config_runs_mxfp4_healing_at_340(staged):
    from training.fp4 import Fp4Recipe, Fp4Settings

    bench, env, cfg = _staged_primus(staged, ORACLE_LORA)
    assert cfg.requested_precision() == "fp8" and cfg.healing_precision == "FP8_DS"
    recipe = Fp4Recipe("mxfp4", mxfp4_hadamard=True)
    # its warm-up (SYNTH_WARMUP_STEPS=5) in the run's precision: no WARMUP_RECIPE
    assert cfg.fp4_settings() == Fp4Settings(recipe, healing_iter=340, warmup_in_fp8=False)
    _fp4_names_reach_the_recipe(bench, env, cfg)


def test_amds_8b_config_runs_mxfp4_throughout_after_an_fp8_warmup(staged):
    from training.fp4 import Fp4Recipe, Fp4Settings

    bench, env, cfg = _staged_primus(staged, AMD_8B)
    assert cfg.requested_precision() == "fp8" and cfg.synthetic_warmup_steps == 20
    recipe = Fp4Recipe("mxfp4", mxfp4_hadamard=True)
    assert cfg.fp4_settings() == Fp4Settings(recipe, healing_iter=None, warmup_in_fp8=True)
    _fp4_names_reach_the_recipe(bench, env, cfg)


def _stage_nemo(
    tmp_path: Path, bench: str, config: str, files: dict[str, bytes | str]
) -> tuple[dict, object]:
    """NVIDIA's NeMo `config` beside the files it sources (`files`: name -> content), through the
    launcher's config stage; the environment it leaves and the trainer's config of it."""
    folder = tmp_path / "nemo"
    folder.mkdir()
    for name, content in {Path(config).name: (V6 / config).read_bytes(), **files}.items():
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    env = stage_env(tmp_path, BENCHMARK=bench)
    staged_config = str(folder / Path(config).name)
    subprocess.run(
        ["bash", "-c", STAGE, "stage", str(REPO), str(tmp_path), staged_config],
        env=env,
        check=True,
        timeout=120,
    )
    assert (tmp_path / "1.rc").read_text().strip() == "0", (tmp_path / "1.out").read_text()
    raw = (tmp_path / "1.env").read_bytes().decode().split("\0")
    staged = dict(item.split("=", 1) for item in raw if "=" in item)
    cfg, problems = trainer_config(bench, staged)
    assert problems == []
    return staged, cfg


def test_nvidias_b200_lora_config_runs_nvfp4_healing_at_350(tmp_path):
    from training.fp4 import Fp4Recipe, Fp4Settings

    common = {
        "config_common.sh": (V6 / NVIDIA_LORA_COMMON).read_bytes(),
        "config_common_fp4.sh": NVIDIA_LORA_FP4,
    }
    env, cfg = _stage_nemo(tmp_path, "llama2_70b_lora", DELL_B200_LORA, common)
    assert cfg.requested_precision() == "fp8" and cfg.fp8_dpa and cfg.healing_precision == "FP8_DS"
    recipe = Fp4Recipe("nvfp4", nvfp4_rht=False, nvfp4_2d=False, nvfp4_stochastic=True)
    assert cfg.fp4_settings() == Fp4Settings(recipe, healing_iter=350, warmup_in_fp8=False)
    _fp4_names_reach_the_recipe("llama2_70b_lora", env, cfg)


def test_nvidias_8b_fp4_config_runs_nvfp4_throughout(tmp_path):
    """ASUSTeK's copy of NVIDIA's 8B FP4 setup, its own config_common*.sh beside it; the two it sources that
    the public copy lacks (CUDA graphs, FP8 attention) left empty."""
    from training.fp4 import Fp4Recipe, Fp4Settings

    folder = f"ASUSTeK/{EIGHT_B}/nemo"
    names = ("config_common.sh", "config_common_8b.sh", "config_common_fp4.sh")
    common = {name: (V6 / folder / name).read_bytes() for name in names}
    common |= {"config_common_cg.sh": "", "config_common_fp8attn.sh": ""}
    env, cfg = _stage_nemo(tmp_path, "llama31_8b", f"{folder}/config_XA_NB3I_E12.sh", common)
    assert cfg.requested_precision() == "fp8"
    # config_common_fp4.sh, sourced last, turns off the stochastic rounding and 2D blocks config_common_8b.sh
    # turned on
    recipe = Fp4Recipe("nvfp4", nvfp4_rht=False, nvfp4_2d=False, nvfp4_stochastic=False)
    assert cfg.fp4_settings() == Fp4Settings(recipe, healing_iter=None, warmup_in_fp8=False)
    _fp4_names_reach_the_recipe("llama31_8b", env, cfg)
