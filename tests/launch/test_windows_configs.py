"""A config saved on Windows (CRLF line endings, a UTF-8 byte-order mark), sourced as users do or given as
CONFIG_FILE: refused before any run, in one line that names the line endings and the command that fixes them,
with no carriage return in it."""

from __future__ import annotations

import subprocess

import pytest

from tests.launch.helpers import CONFIG, REPO, SYSTEM


def _one_error(result) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "\r" not in result.stderr + result.stdout, result.stderr
    assert result.stdout.count("Beginning trial") == 0
    return errors[0]


def _windows(launch, text: str, bom: bool = False):
    path = launch.tmp / f"config_{SYSTEM}.sh"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    return path


@pytest.mark.parametrize("how", ["sourced", "config_file"])
def test_crlf_config_is_refused_with_the_fix(launch, how):
    path = _windows(launch, CONFIG.replace("\n", "\r\n"))
    result = launch.run_sourced(path) if how == "sourced" else launch.run()
    line = _one_error(result)
    assert "Windows line endings (CRLF)" in line, line
    assert f"sed -i 's/\\r$//' {path} (or dos2unix {path}), then source it again" in line, line
    if how == "sourced":  # the shell's values end in \r: the first one that names the config says so
        said = f"DGXSYSTEM={SYSTEM} ends in a carriage return: {path} was saved with Windows line endings"
        assert line.startswith(f"run_with_docker.sh: error: {said} (CRLF): convert it: sed -i")
    assert launch.calls() == [] and not launch.logdir.exists()


def test_a_crlf_config_file_named_in_the_shell(launch):
    """The shipped configs name themselves: CONFIG_FILE's value ends in \\r, and the file is still named."""
    path = _windows(
        launch, f"export CONFIG_FILE={launch.tmp}/config_{SYSTEM}.sh\n{CONFIG}".replace("\n", "\r\n")
    )
    line = _one_error(launch.run_sourced(path))
    assert line.startswith(
        f"run_with_docker.sh: error: CONFIG_FILE={path} ends in a carriage return: {path} was"
    )


def test_a_crlf_file_the_config_sources_is_named_by_its_variable(launch):
    (launch.tmp / "extra.sh").write_bytes(b"export LR=0.002\r\n")
    path = _windows(launch, CONFIG + f"source {launch.tmp}/extra.sh\n")
    line = _one_error(launch.run_sourced(path))
    assert line.startswith("run_with_docker.sh: error: LR=0.002 ends in a carriage return:"), line


@pytest.mark.parametrize("how", ["sourced", "config_file"])
def test_a_byte_order_mark_is_refused_with_the_fix(launch, how):
    path = _windows(launch, CONFIG, bom=True)
    result = launch.run_sourced(path) if how == "sourced" else launch.run()
    line = _one_error(result)
    assert f"{path} starts with a UTF-8 byte-order mark" in line
    assert f"sed -i '1s/^\\xEF\\xBB\\xBF//' {path} (or dos2unix {path})" in line


def test_a_byte_order_mark_that_stops_the_sourcing_is_hinted_at(launch):
    """A config whose first line is a comment with a byte-order mark is a syntax error to bash (the comment's
    parenthesis): sourcing it sets nothing, and the launcher's "no config" says what may be why."""
    path = _windows(launch, "# a comment (with parentheses)\n" + CONFIG, bom=True)
    env = {k: v for k, v in launch.env.items() if k != "CONFIG_FILE"}
    user = 'source "$1"; bash "$2"'  # two commands typed: the second runs whatever the first did
    result = subprocess.run(
        ["bash", "-c", user, "user", str(path), str(REPO / "run_with_docker.sh")],
        env=env,
        cwd=launch.tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = result.stderr.splitlines()
    assert "syntax error" in said[0] and len(said) == 3  # bash's two lines, then the launcher's one
    assert said[2].startswith("run_with_docker.sh: error: no config: ") and "dos2unix FILE" in said[2]
