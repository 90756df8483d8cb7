"""The config the user sourced is the config that runs (issue 19, item 1): its names are read from the file
the user sourced, never from a repository file that happens to share its name, and the file is never run a
second time (a command in it would repeat; what depends on the caller's environment would be lost)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.launch.helpers import REPO

MI300X = REPO / "configs" / "bert" / "config_MI300X_1x8x48.sh"
# How a config names itself (every shipped config starts so): the launchers read its names from this file.
SELF = """\
CONFIG_FILE=$(readlink -f "${BASH_SOURCE[0]}")
DGXSYSTEM=$(basename "${CONFIG_FILE}" .sh)
export CONFIG_FILE DGXSYSTEM=${DGXSYSTEM#config_}
"""
BODY = """\
export BENCHMARK=bert DGXNNODES=1 DGXNGPU=2
export BATCHSIZE=4 LR=0.001
"""


def edited_copy(directory: Path, *lines: str) -> Path:
    """A user's copy of a shipped config, kept under its name outside the repository, with lines added."""
    directory.mkdir(parents=True, exist_ok=True)
    copy = directory / MI300X.name
    copy.write_text(MI300X.read_text() + "".join(f"{line}\n" for line in lines))
    return copy


def config_vars(launch) -> list[str]:
    (run,) = launch.module_calls("torch.distributed.run")
    return run.env["CONFIG_VARS"].split()


def test_an_edited_copy_outside_the_repo_is_what_runs(launch):
    copy = edited_copy(launch.tmp / "mine", "export BATCHSIZE=24", "export OPT_LAMB_BETA1=0.7")
    result = launch.run_sourced(copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Config {copy}:" in result.stdout and str(MI300X) not in result.stdout
    (run,) = launch.module_calls("torch.distributed.run")
    assert run.env["BATCHSIZE"] == "24"
    assert "OPT_LAMB_BETA1" in config_vars(launch)  # so the trainer reports the typo, with a suggestion


def test_an_edited_copy_reaches_the_container(docker_launch):
    copy = edited_copy(docker_launch.tmp / "mine", "export OPT_LAMB_BETA1=0.7")
    result = docker_launch.run_sourced(copy)
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = [c.argv for c in docker_launch.calls("docker") if c.argv[0] == "run"]
    assert "--env=OPT_LAMB_BETA1" in run and "--env=CONFIG_FILE" not in run  # a host path, not for inside


def test_a_sourced_config_that_does_not_name_itself_is_refused(launch):
    # A config of the old template, named like a shipped one: which file was sourced cannot be known.
    mine = launch.tmp / "mine" / MI300X.name
    mine.parent.mkdir()
    mine.write_text(MI300X.read_text().replace("CONFIG_FILE", "NOT_CONFIG_FILE") + "export TYPO_NAME=1\n")
    result = launch.run_sourced(mine)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "DGXSYSTEM=MI300X_1x8x48 is set but CONFIG_FILE is not" in result.stderr
    assert str(MI300X) in result.stderr  # the repository's file of that name, named as not necessarily it
    assert launch.calls() == []


def test_a_config_given_by_config_file_runs_once(launch):
    count = launch.tmp / "sourced.count"
    config = launch.tmp / "config_TEST_1x2x4.sh"
    config.write_text(SELF + BODY + f"echo sourced >>{count}\n")
    result = launch.run(CONFIG_FILE=str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert count.read_text().splitlines() == ["sourced"]


def test_a_sourced_config_is_not_run_again(launch):
    count = launch.tmp / "sourced.count"
    config = launch.tmp / "config_TEST_1x2x4.sh"
    config.write_text(SELF + BODY + f"echo sourced >>{count}\n")
    result = launch.run_sourced(config)
    assert result.returncode == 0, result.stdout + result.stderr
    assert count.read_text().splitlines() == ["sourced"]  # by the user's shell only


def test_a_name_exported_for_this_caller_only_is_passed_on(docker_launch):
    config = docker_launch.tmp / "config_TEST_1x2x4.sh"
    config.write_text(SELF + BODY + "if [[ -n ${WANT_NCCL_DEBUG:-} ]]; then export NCCL_DEBUG=INFO; fi\n")
    result = docker_launch.run_sourced(config, WANT_NCCL_DEBUG="1")
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = [c.argv for c in docker_launch.calls("docker") if c.argv[0] == "run"]
    assert "--env=NCCL_DEBUG" in run
    # without it, the name is not required: exported only under a condition
    docker_launch.env["FAKE_CALLS"] += ".2"
    result = docker_launch.run_sourced(config)
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = [c.argv for c in docker_launch.calls("docker") if c.argv[0] == "run"]
    assert "--env=NCCL_DEBUG" not in run


# ---- reading a config's names from its text (scripts/run_common.sh: config_names) ----


def read_names(config: Path) -> tuple[subprocess.CompletedProcess, list[str], list[str]]:
    """(result, every name in order, the names exported only under a condition) of config_names FILE."""
    script = (
        'RUNNER=test && source "$1" && config_names "$2" && printf "%s\\n" "${_config_names[*]}" '
        '"${_config_conditional[*]}"'
    )
    result = subprocess.run(
        ["bash", "-c", script, "t", str(REPO / "scripts" / "run_common.sh"), str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    lines = result.stdout.splitlines() if result.returncode == 0 else ["", ""]
    return result, lines[0].split(), lines[1].split()


def test_names_are_read_from_the_text_without_running_it(tmp_path):
    config = tmp_path / "config_X_1x1x1.sh"
    config.write_text(
        "# export COMMENTED=1\n"
        + SELF
        + 'export A=1 B="x y" C=\'#not a comment\' D=$(echo "a b" | tr a b) # E=1\n'
        "export F=${F:-1} \\\n  G=2\n"
        "H=3\n"
        "export H; I=4; export I J=5\n"
        'echo "export NOT_A=1"\n'
        'X="$(export NOT_B=1)"\n'
        "[[ -n ${X:-} ]] && export K=1\n"
        "if true; then\n  export L=1\nfi\n"
        "f() { export M=1; }\n"
        "touch ran\n"
    )
    result, names, conditional = read_names(config)
    assert result.returncode == 0, result.stderr
    assert names == ["CONFIG_FILE", "DGXSYSTEM", "A", "B", "C", "D", "F", "G", "H", "I", "J", "K", "L", "M"]
    assert conditional == ["K", "L", "M"]
    assert not (tmp_path / "ran").exists()


def test_names_of_a_config_it_sources_are_read_too(tmp_path):
    (tmp_path / "base.sh").write_text("export BASE_A=1\n")
    (tmp_path / "abs.sh").write_text("export ABS_B=1\n")
    config = tmp_path / "config_X_1x1x1.sh"
    config.write_text(
        'source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/base.sh"\n'
        f". {tmp_path / 'abs.sh'}\n"
        "export OWN=1\n"
    )
    result, names, _ = read_names(config)
    assert result.returncode == 0, result.stderr
    assert names == ["BASE_A", "ABS_B", "OWN"]


@pytest.mark.parametrize(
    "line, why",
    [
        ('eval "export A=1"', "eval"),
        ("set -a", "set -a"),
        ("set -euao pipefail", "set -a"),
        ("set -o allexport", "set -a"),
        ("declare -x A=1", "declare -x"),
        ("typeset -gx A=1", "typeset -x"),
        ("export -n A", "export -n"),
        ('export "${NAME}=1"', "not a variable name"),
        ("source ./base.sh", "cannot tell which file"),
        ('source "${HOME}/base.sh"', "cannot tell which file"),
        ("cat <<EOF\nexport A=1\nEOF", "here-document"),
    ],
)
def test_what_could_export_unseen_is_refused_naming_the_line(tmp_path, line, why):
    config = tmp_path / "config_X_1x1x1.sh"
    config.write_text(f"export OK=1\n{line}\n")
    result, _, _ = read_names(config)
    assert result.returncode == 2, result.stdout
    assert f"{config}:2:" in result.stderr and why in result.stderr
