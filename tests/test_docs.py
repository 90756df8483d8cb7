"""The docs say what happens: the file names the runs write, the commands of the CPU configs' own
comments, one image name per Dockerfile, the throughput suite's exit statuses, the LoRA demo's end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(
    {
        *ROOT.glob("*.md"),
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("training/**/README.md"),
        *ROOT.glob("input_preprocessing/**/README.md"),
        *ROOT.glob("configs/*/*.sh"),
        *ROOT.glob("Dockerfile.*"),
        *ROOT.glob("input_preprocessing/**/*.sh"),
    }
)


def test_the_outputs_table_names_every_benchmark_s_files():
    outputs = (ROOT / "README.md").read_text().split("## Outputs", 1)[1].split("\n## ", 1)[0]
    assert "`bert_<SYSTEM>" not in outputs
    for suffix in (".log", ".config.json", ".outcome.json", ".compliance.txt"):
        assert f"`<BENCHMARK>_<SYSTEM>_<i>{suffix}`" in outputs


@pytest.mark.parametrize("config", sorted(ROOT.glob("configs/*/config_CPU_*.sh")), ids=lambda p: p.name)
def test_a_cpu_config_s_command_runs_without_a_container(config):
    """As written in its comment: without CONTAINER_RUNTIME=none it stops with "CONT not set"."""
    commands = [line for line in config.read_text().splitlines() if "bash run_with_docker.sh" in line]
    assert commands and all("CONTAINER_RUNTIME=none" in line for line in commands)


def test_one_image_name_per_dockerfile():
    """`docker build -f Dockerfile.X -t NAME` and the CONT=NAME / `docker run ... NAME` that go with it."""
    built: dict[str, set[str]] = {}
    used = set()
    for doc in DOCS:
        text = doc.read_text()
        for dockerfile, tag in re.findall(r"-f (Dockerfile\.\w+) -t (mlperf/[\w.-]+)", text):
            built.setdefault(dockerfile, set()).add(tag)
        used |= set(re.findall(r"\b(mlperf/[a-z0-9_]+)\b", text))
    assert set(built) == {p.name for p in ROOT.glob("Dockerfile.*")}
    assert all(len(tags) == 1 for tags in built.values()), built
    assert used <= {tag for tags in built.values() for tag in tags}, used


def test_the_throughput_readme_says_what_a_bad_flag_gives_under_torchrun():
    text = (ROOT / "training" / "throughput" / "README.md").read_text()
    assert "Every bad flag, model type or config key is an error naming it (exit status 2)" not in text
    assert "torchrun itself then exits 1" in text and "configs/throughput/tiny-llama.json" in text


def test_the_lora_demo_s_end_is_its_target():
    """A run stops at its first evaluation under TARGET, not at the loss a full run would reach."""
    target = re.search(r"TARGET=([\d.]+)", (ROOT / "configs/llama2_70b_lora/config_CPU_1x1x1.sh").read_text())
    text = " ".join((ROOT / "training" / "llama2_70b_lora" / "README.md").read_text().split())
    assert f"stops at its first evaluation under the demo's target {target.group(1)}" in text
