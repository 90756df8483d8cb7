"""The config the user sourced is the config that runs: its names are those the file the
user sourced exports, never a repository file that happens to share its name. The launchers find them by
sourcing it again in subshells (scripts/run_common.sh: config_names), with the user's values and from an empty
environment; what they pass on is this shell's values, never those of the second sourcing."""

from __future__ import annotations

import subprocess
from pathlib import Path

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


def test_a_sourced_config_passes_on_the_values_it_gave_in_the_users_shell(launch):
    stamps = launch.tmp / "stamps"
    config = launch.tmp / "config_TEST_1x2x4.sh"
    # a value that differs each time the file is sourced: the user's shell's is the one that runs
    config.write_text(SELF + BODY + f"export BATCHSIZE=$RANDOM$RANDOM$RANDOM\necho $BATCHSIZE >>{stamps}\n")
    result = launch.run_sourced(config)
    assert result.returncode == 0, result.stdout + result.stderr
    users, *again = stamps.read_text().split()
    assert len(again) == 2 and users not in again  # sourced again, in subshells, by config_names
    (run,) = launch.module_calls("torch.distributed.run")
    assert run.env["BATCHSIZE"] == users


def test_a_name_the_config_exports_only_while_unset_is_passed_on(docker_launch):
    config = docker_launch.tmp / "config_TEST_1x2x4.sh"
    config.write_text(SELF + BODY + "[[ -n ${NCCL_SOCKET_IFNAME:-} ]] || export NCCL_SOCKET_IFNAME=lo\n")
    result = docker_launch.run_sourced(config)
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = [c.argv for c in docker_launch.calls("docker") if c.argv[0] == "run"]
    assert "--env=NCCL_SOCKET_IFNAME" in run


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


# ---- the names of a config: what bash exports when it sources it (scripts/run_common.sh: config_names) ----


def read_names(config: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str], list[str]]:
    """(result, every name, the names seen only from an empty environment) of config_names FILE."""
    script = (
        'RUNNER=test && source "$1" && config_names "$2" && printf "%s\\n" "${_config_names[*]}" '
        '"${_config_conditional[*]}"'
    )
    result = subprocess.run(
        ["bash", "-c", script, "t", str(REPO / "scripts" / "run_common.sh"), str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", **env},
    )
    lines = result.stdout.splitlines() if result.returncode == 0 else ["", ""]
    return result, lines[0].split(), lines[1].split()


def test_every_way_of_exporting_is_seen_and_nothing_else(tmp_path):
    config = tmp_path / "config_X_1x1x1.sh"
    config.write_text(
        "# export COMMENTED=1\n"
        + SELF
        + 'export A=1 B="x y" C=\'#not a comment\' D=$(echo "a b" | tr a b) # E=1\n'
        "H=3\nexport H\n"
        'echo "export NOT_A=1"\n'
        'X="$(export NOT_B=1)"\n'
        "set -a\nSET_A=1\nset +a\n"
        'eval "export EVAL=1"\n'
        "declare -x DECLARED=1\n"
        'NAME=COMPUTED && export "${NAME}=1"\n'
        "cat <<EOF >/dev/null\nexport HEREDOC=1\nEOF\n"
        "export GONE=1 && export -n GONE\n"
        "[[ -n ${WANTED:-} ]] && export IF_WANTED=1\n"
        "f() { export NEVER=1; }\n"
        "echo to-stdout; echo to-stderr >&2\n"
    )
    result, names, conditional = read_names(config, WANTED="1")
    assert result.returncode == 0, result.stderr
    assert names == sorted(
        [
            "CONFIG_FILE",
            "DGXSYSTEM",
            "A",
            "B",
            "C",
            "D",
            "H",
            "SET_A",
            "EVAL",
            "DECLARED",
            "COMPUTED",
            "IF_WANTED",
        ]
    )
    assert conditional == [] and "to-std" not in result.stdout + result.stderr
    _, names, _ = read_names(config)
    assert "IF_WANTED" not in names  # the caller's environment decides, as it did for the user


def test_names_of_a_config_it_sources_are_found_too(tmp_path):
    (tmp_path / "base.sh").write_text("export BASE_A=1\n")
    (tmp_path / "abs.sh").write_text("export ABS_B=1\n")
    config = tmp_path / "config_X_1x1x1.sh"
    config.write_text(
        'source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/base.sh"\n'
        f'HERE={tmp_path}\nsource "$HERE/abs.sh"\n'
        "export OWN=1\n"
    )
    result, names, _ = read_names(config)
    assert result.returncode == 0, result.stderr
    assert names == ["ABS_B", "BASE_A", "OWN"]


def test_a_config_that_stops_half_way_gives_what_it_exported_before(tmp_path):
    config = tmp_path / "config_X_1x1x1.sh"
    config.write_text('export FIRST=1\n: "${NEEDED:?set NEEDED}"\nexport SECOND=1\n')
    assert read_names(config)[1] == ["FIRST"]  # as the user's interactive shell: the source stops there
    assert read_names(config, NEEDED="1")[1] == ["FIRST", "SECOND"]


def test_a_name_exported_only_while_unset_is_conditional(tmp_path):
    config = tmp_path / "config_X_1x1x1.sh"
    config.write_text("export A=1\n[[ -n ${ONCE:-} ]] || export ONCE=1\n")
    result, names, conditional = read_names(config, ONCE="1")  # the user's own sourcing set it
    assert result.returncode == 0, result.stderr
    assert (names, conditional) == (["A", "ONCE"], ["ONCE"])


def test_a_missing_config_is_named(tmp_path):
    result, _, _ = read_names(tmp_path / "config_X_1x1x1.sh")
    assert result.returncode == 2 and f"{tmp_path}/config_X_1x1x1.sh: no such config file" in result.stderr
