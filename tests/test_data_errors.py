"""Every data error says what to do next: the launcher's DATADIR and MODEL errors and the preflight's data,
model and eval-set problems end with the command that prepares that folder for the benchmark
(training.prepare_hint, from the table's flags), in a few lines whose first names the problem."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.launch.helpers import CONFIG, FAKES, SYSTEM, fake_launch
from training import preflight
from training.prepare_hint import model_command, prepare_command

REPO = Path(__file__).resolve().parents[1]
SCRIPT = "./input_preprocessing/prepare_data.sh"


def test_the_commands_are_the_readmes():
    """The README's own commands, from the DATADIR each of its runs uses."""
    readme = (REPO / "README.md").read_text().replace("-e HF_TOKEN ", "")  # (the 70B download's token)
    for command in [
        prepare_command("bert", "/bert_data"),
        prepare_command("llama31_8b", "/data/llama/data", image=("docker", "mlperf/llama8b")),
        prepare_command("llama2_70b_lora", "/data/mlperf_llama2", image=("docker", "mlperf/llama70b")),
        prepare_command("llama2_70b_lora", "/tmp/lora", sample=True),
    ]:
        assert command in readme, command
    assert prepare_command("llama31_8b", "/tmp/llama", sample=True) == (
        f"BENCHMARK=llama31_8b {SCRIPT} --outputdir /tmp/llama --sample"
    )  # the README's, through the top-level script
    # a DATADIR not named as the full preparation names it: prepared into, then pointed at its data/
    assert prepare_command("llama31_8b", "/x") == (
        f"BENCHMARK=llama31_8b {SCRIPT} --outputdir /x; then export DATADIR=/x/data"
    )
    # MODEL is a preparation's OUTPUTDIR/model
    assert (
        model_command("llama31_8b", "/d/llama/model") == f"BENCHMARK=llama31_8b {SCRIPT} --outputdir /d/llama"
    )
    assert (
        model_command("llama2_70b_lora", "/d/m/model")
        == f"BENCHMARK=llama2_70b_lora {SCRIPT} --outputdir /d/m"
    )
    assert prepare_command("bert", "/my data").endswith("--outputdir '/my data' --packed-data")


def test_the_bert_sample_flags_are_the_demos():
    demo = (REPO / "demo.sh").read_text()
    flags = prepare_command("bert", "/d", sample=True).split("--outputdir /d ")[1].split()
    for flag in flags:
        if flag.startswith("--"):
            assert flag in demo, flag


# ---- the launcher (the fake PYTHON runs the real training.prepare_hint) ----


@pytest.mark.parametrize(
    "env, first",
    [
        ({"DATADIR": "{tmp}/nowhere"}, "DATADIR={tmp}/nowhere: no such directory (the prepared data folder)"),
        (
            {"DATADIR": "{tmp}/config_TEST_1x2x4.sh"},
            "DATADIR={tmp}/config_TEST_1x2x4.sh is a file, not a folder",
        ),
        ({"MODEL": "{tmp}/no_model"}, "MODEL={tmp}/no_model: no such directory (the model folder"),
    ],
    ids=["missing", "a-file", "model-missing"],
)
def test_the_launchers_data_errors_end_with_the_command(tmp_path, env, first):
    launch = fake_launch(tmp_path, SYSTEM, CONFIG)
    result = launch.run(**{k: v.format(tmp=tmp_path) for k, v in env.items()})
    assert result.returncode == 2
    said = result.stderr.splitlines()
    assert len(said) == 2 and said[0].startswith(f"run_with_docker.sh: error: {first.format(tmp=tmp_path)}")
    folder = "DIR" if "a file" in said[0] else env.get("DATADIR", "").format(tmp=tmp_path)
    if "MODEL" in env:  # the model is a preparation's OUTPUTDIR/model
        folder = str(tmp_path)
    assert said[1] == f"  to prepare it for bert: cd {REPO} && {SCRIPT} --outputdir {folder} --packed-data"
    assert not launch.logdir.exists() and launch.module_calls("training.preflight") == []


def test_with_docker_the_command_runs_in_the_image(tmp_path):
    launch = fake_launch(tmp_path, SYSTEM, CONFIG)
    (tmp_path / "bin" / "docker").symlink_to(FAKES / "docker")
    result = launch.run(
        CONTAINER_RUNTIME="docker", CONT="mlperf/bert:test", DATADIR=str(tmp_path / "nowhere")
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[1] == (
        f"  to prepare it for bert: docker run -it -v {tmp_path}/nowhere:/data mlperf/bert:test {SCRIPT} "
        "--outputdir /data --packed-data"
    )


# ---- the preflight ----


def config_env(config: str) -> dict[str, str]:
    """What sourcing a shipped config exports, with CONFIG_VARS naming it, as the launcher passes it on."""

    def sourced(then: str) -> str:
        script = f'source "$1" >/dev/null; {then}'
        return subprocess.run(
            ["env", "-i", "PATH=/usr/bin:/bin", "bash", "-c", script, "cfg", config],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    names = set(sourced("compgen -e").split()) - {"PATH", "PWD", "SHLVL", "_", "OLDPWD"}
    values = dict(item.split("=", 1) for item in sourced("env -0").split("\0") if "=" in item)
    return {**{name: values[name] for name in names}, "CONFIG_VARS": " ".join(sorted(names))}


def run_preflight(monkeypatch, capsys, config: str, **env: str) -> list[str]:
    """`python -m training.preflight` in this process: its exit status 1, and what it said on stderr."""
    for name, value in {**config_env(config), **env}.items():
        monkeypatch.setenv(name, value)
    assert preflight.main([]) == 1
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("preflight: ")]


def test_an_empty_datadir_is_one_line_then_the_command(monkeypatch, capsys, tmp_path):
    said = run_preflight(monkeypatch, capsys, "configs/bert/config_CPU_1x1x10.sh", DATADIR=str(tmp_path))
    assert said[0] == f"preflight: DATADIR {tmp_path} is empty: no data was prepared there" and len(said) == 2
    assert said[1].startswith(f"preflight: to prepare DATADIR for bert: {SCRIPT} --outputdir {tmp_path} ")
    assert said[1].endswith("--max-seq-length 128 --max-predictions-per-seq 20")  # the CPU config's sample


def test_a_missing_datadir(monkeypatch, capsys, tmp_path):
    config = "configs/llama2_70b_lora/config_CPU_1x1x1.sh"
    said = run_preflight(monkeypatch, capsys, config, DATADIR=str(tmp_path / "lora"))
    assert said == [
        f"preflight: DATADIR {tmp_path}/lora: no such folder",
        "preflight: to prepare DATADIR for llama2_70b_lora: BENCHMARK=llama2_70b_lora "
        f"{SCRIPT} --outputdir {tmp_path}/lora --sample --seq-len 256",
    ]


def test_a_missing_model_folder_is_prepared_with_its_data(monkeypatch, capsys, tmp_path):
    """MODEL is a preparation's OUTPUTDIR/model: a MODEL away from DATADIR gets the command for its own."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "stray.txt").write_text("not the data\n")
    config = "configs/llama31_8b/config_H200_1x8x1_8b.sh"
    model = str(tmp_path / "elsewhere" / "model")
    said = run_preflight(monkeypatch, capsys, config, DATADIR=str(tmp_path / "data"), MODEL=model)
    assert len(said) <= 8 and any(
        f"MODEL={tmp_path}/elsewhere/model: no such folder" in line for line in said
    )
    assert said[-2:] == [
        f"preflight: to prepare DATADIR for llama31_8b: BENCHMARK=llama31_8b {SCRIPT} --outputdir {tmp_path}",
        f"preflight: to prepare MODEL for llama31_8b: BENCHMARK=llama31_8b {SCRIPT} --outputdir "
        f"{tmp_path}/elsewhere",
    ]
