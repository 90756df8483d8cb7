"""Every published config of AMD's and NVIDIA's BERT, Llama 2 70B LoRA and Llama 3.1 8B implementations
(MLCommons' training_results v4.0-v5.1, kept in tests/data/published/ with the files they source; provenance
in its manifest.json) goes through the launcher's config stage (scripts/run_common.sh: load_config and
config_env, as run_with_docker.sh runs them, no container) and the preflight's config check
(training.common.preflight), and the hyperparameters our trainer would log for it (its log_hyperparameters)
equal what that submission's own result_0.txt logged (tests/data/published/logged.json: extracted from the
logs, with their repository, commit and path), and so do its first two evaluations (LoRA, 8B).

None is refused. What runs here otherwise than the config says is said by the config's `substitutions` (the
preflight and the trainer print it, the effective config records it), with the same recipe, and decided here:
- FP4=True (NVIDIA's NVFP4 configs) runs its recipe with emulated 4-bit GEMMs except on sm100 GPUs, said.
- NVIDIA's 8B at 128 nodes uses TP 2 x CP 4 together: run as CP 8 (the same data-parallel size, so the same
  global batch and recipe), said.
- NVIDIA's LoRA with TP x PP x CP > 1 keeps its global batch: FSDP2 over every GPU, whole sequences per GPU
  where the batch allows it, else each sequence split over the fewest GPUs that give every GPU a share
  (context parallelism: their 8 to 128-node configs), said.
- NVIDIA keeps Llama 3.1 405B configs (MODEL_SIZE=405b) in the NeMo folder it shares with the 8B: not an 8B
  config and without an 8B result; refused.
Every other config says nothing of the kind.

Not compared: LoRA's train_samples and eval_samples (the data's rows, not the config's), lora_dropout (no
submission logs it), and BERT's evaluation points (NVIDIA counts the real sequences of the packed rows read so
far, ours nominal samples: a log difference of its own).
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from pathlib import Path

import pytest

from tests.launch.helpers import REPO, stage_env
from training.common import vendor_vars
from training.common.preflight import load_config

DATA = REPO / "tests" / "data" / "published"
MANIFEST = json.loads((DATA / "manifest.json").read_text())["configs"]
LOGGED = json.loads((DATA / "logged.json").read_text())["results"]
NOT_COMPARED = {"llama2_70b_lora": {"train_samples", "eval_samples"}}

# The one key that may differ, for NVIDIA's LoRA with TP x PP x CP > 1 only, by exactly that split over the
# GPUs sharing a sequence here: MINIBS micro-batches of MBS per data-parallel rank there, GBS / (world / CP)
# per GPU here.
KNOWN = {
    "gradient_accumulation_steps": "per-GPU micro-batches: NVIDIA's TP/CP ranks share sequences, ours not"
}


def v50_nemo_evaluations(skip: int, gbs: int, interval: int = 384) -> list[int]:
    """Where NVIDIA's v5.0 LoRA evaluated (samples_count of the first two): Lightning's check at
    floor((SKIP_EVALS + 1) x 384 / GBS) steps, then, its callback setting floor(384 / GBS), at the next
    multiple of that (170 then 210 at GBS 9; 106 then 126 at GBS 18). v5.1's NeMo and ours take
    ceil(384 / GBS) steps from the start: 172 then 215 at GBS 9."""
    first, every = (skip + 1) * interval // gbs, interval // gbs
    return [first * gbs, (first // every + 1) * every * gbs]


# Submissions that evaluated by another rule than their config gives here (the rule is checked on their log).
KNOWN_EVALS = {
    "NVIDIA/results/tyche_ngpu72_ngc25.04_nemo/llama2_70b_lora/result_0.txt": v50_nemo_evaluations(3, 9),
    "NVIDIA/results/tyche_ngpu144_ngc25.04_nemo/llama2_70b_lora/result_0.txt": v50_nemo_evaluations(4, 18),
}

STAGE = r"""
RUNNER=published REPO_DIR=$1 && shift
source "${REPO_DIR}/scripts/run_common.sh"
out=$1 && shift
i=0
for config; do
  i=$((i + 1))
  (
    export CONFIG_FILE=${config}
    load_config && config_env && env -0 >"${out}/${i}.env"
  ) >"${out}/${i}.out" 2>&1
  echo $? >"${out}/${i}.rc"
done
"""


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    """The launcher's config stage run on every published config, in one shell: for config i, its exit status
    (i.rc), output (i.out) and the environment it leaves for the trainer (i.env)."""
    out = tmp_path_factory.mktemp("staged")
    env = stage_env(out)
    configs = [str(DATA / entry["stored"]) for entry in MANIFEST]
    subprocess.run(
        ["bash", "-c", STAGE, "stage", str(REPO), str(out), *configs], env=env, check=True, timeout=300
    )
    return out


class Recorder:
    def __init__(self):
        self.logged = {}

    def hyperparameters(self, values: dict) -> None:
        self.logged.update(values)


def trainer_config(bench: str, env: dict[str, str]):
    from training.bert.config import BertConfig
    from training.llama2_70b_lora.config import LoraConfig
    from training.llama31_8b.config import LlamaPretrainConfig

    cls = {"bert": BertConfig, "llama2_70b_lora": LoraConfig, "llama31_8b": LlamaPretrainConfig}[bench]
    return load_config(cls, env)


def logged_by_us(bench: str, cfg, world: int) -> tuple[dict, tuple[int, int] | None]:
    """The hyperparameters our trainer logs for `cfg` on `world` ranks (its own log_hyperparameters), and
    the samples_count of its first two evaluations (LoRA, 8B)."""
    log = Recorder()
    if bench == "bert":
        from training.bert import train

        train.log_hyperparameters(log, cfg, cfg.global_batch_size(world))
        return log.logged, None
    if bench == "llama2_70b_lora":
        from training.llama2_70b_lora import train

        gbs = cfg.global_batch_size(world)
        train.log_hyperparameters(log, cfg, cfg.parallelism(world), gbs, 3901, 173, True)
        first, every = cfg.eval_steps(world)
        return log.logged, (first * gbs, (first + every) * gbs)
    from training.llama31_8b import train

    train.log_hyperparameters(log, cfg, cfg.parallelism(world))
    first, every = cfg.eval_steps()
    return log.logged, (first * cfg.gbs, (first + every) * cfg.gbs)


def same(ours, theirs) -> bool:
    if isinstance(theirs, (int, float)) and isinstance(ours, (int, float)):
        return math.isclose(float(ours), float(theirs), rel_tol=1e-9, abs_tol=1e-15)
    return ours == theirs


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: f"{e['version']}/{e['path'].split('/', 3)[3]}")
def test_a_published_config_runs_with_the_submissions_hyperparameters(staged, entry):
    i = MANIFEST.index(entry) + 1
    bench = entry["benchmark"]
    assert (staged / f"{i}.rc").read_text().strip() == "0", (staged / f"{i}.out").read_text()
    raw = (staged / f"{i}.env").read_bytes().decode().split("\0")
    env = dict(item.split("=", 1) for item in raw if "=" in item)
    # the config stage: every name it exports is in the vocabulary (or ours), its benchmark and scale told
    assert env["BENCHMARK"] == bench and env["DGXNNODES"].isdigit() and env["DGXNGPU"].isdigit()
    unknown = [n for n in env["CONFIG_VARS"].split() if not known(bench, n)]
    assert unknown == []
    world = int(env["DGXNNODES"]) * int(env["DGXNGPU"])

    cfg, problems = trainer_config(bench, env)
    said = " ".join(problems)
    if env.get("MODEL_SIZE") == "405b":
        assert cfg is None and entry["result"] is None  # Llama 3.1 405B's, beside the 8B's: refused
        return
    assert cfg is not None, said
    assert problems == []
    substituted = " ".join(cfg.substitutions(world))
    tp, cp = (int(env.get(n, "1") or 1) for n in ("TENSOR_MODEL_PARALLEL", "CONTEXT_PARALLEL"))
    expected = {
        "FP4=True: the NVFP4 GEMMs run emulated": env.get("FP4", "").lower() == "true",
        f"runs as CONTEXT_PARALLEL_SIZE={tp * cp}": bench == "llama31_8b" and tp > 1 and cp > 1,
        "here FSDP2 over the": bench == "llama2_70b_lora" and cfg.model_parallel() > 1,
    }
    assert {needle: needle in substituted for needle in expected} == expected, substituted
    assert bool(substituted) == any(expected.values())
    if bench == "llama2_70b_lora" and cfg.global_batch_size(world) < world:
        assert cfg.parallelism(world).cp == world // cfg.global_batch_size(world)
        assert "(context parallelism)" in substituted

    if entry["result"] is None:
        return
    theirs = LOGGED[f"{entry['version']}/{entry['result']}"]
    ours, evals = logged_by_us(bench, cfg, world)
    compared = [k for k in theirs["logged"] if k in ours and k not in NOT_COMPARED.get(bench, ())]
    assert {"global_batch_size", "opt_base_learning_rate"} <= set(compared)
    differ = {k: (ours[k], theirs["logged"][k]) for k in compared if not same(ours[k], theirs["logged"][k])}
    allowed = set(KNOWN) if bench == "llama2_70b_lora" and cfg.model_parallel() > 1 else set()
    assert set(differ) <= allowed, differ
    for key in differ:  # MINIBS micro-batches per data-parallel rank there, MINIBS x CP / (TP x PP x CP) here
        split = cfg.model_parallel() // cfg.parallelism(world).cp
        assert ours[key] * split == theirs["logged"][key], KNOWN[key]
    if evals is not None:
        want = theirs["eval_samples_count"]
        assert list(evals) == want or KNOWN_EVALS.get(entry["result"]) == want, (evals, want)


def known(bench: str, name: str) -> bool:
    """A name the trainer of `bench` reads, the launchers read, or the vocabulary has a row for (a library's
    too: the table is complete for the published configs, prefix or not)."""
    from training.common.config import LAUNCHER_VARS

    return (
        name in LAUNCHER_VARS
        or name in vendor_vars.names(bench)
        or name in OURS[bench]
        or name == "BENCHMARK"
    )


def _ours() -> dict[str, set[str]]:
    from training.bert.config import BertConfig
    from training.llama2_70b_lora.config import LoraConfig
    from training.llama31_8b.config import LlamaPretrainConfig

    out = {}
    for bench, cls in (
        ("bert", BertConfig),
        ("llama2_70b_lora", LoraConfig),
        ("llama31_8b", LlamaPretrainConfig),
    ):
        fields = [f for f in dataclasses.fields(cls) if "env" in f.metadata]
        out[bench] = {f.metadata["env"] for f in fields} | {
            a for f in fields for a in f.metadata.get("aliases", ())
        }
    return out


OURS = _ours()


def test_the_manifest_names_every_published_config_and_its_provenance():
    """58 config files of the four rounds (a folder identical in a later round stored once), each with its
    repository, commit and path; those with a result name the result_0.txt logged.json holds."""
    assert len(MANIFEST) == 58
    for entry in MANIFEST:
        assert (DATA / entry["stored"]).is_file()
        assert entry["repository"].startswith("mlcommons/training_results_v") and len(entry["commit"]) == 40
        for sibling in entry["sources"]:
            assert (DATA / entry["stored"]).with_name(sibling).is_file()
        if entry["result"]:
            assert f"{entry['version']}/{entry['result']}" in LOGGED
    assert sum(entry["result"] is None for entry in MANIFEST) == 7  # NVIDIA's 405B configs
    assert {e["benchmark"] for e in MANIFEST} == {"bert", "llama2_70b_lora", "llama31_8b"}
