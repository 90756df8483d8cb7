"""A full disk in LOGDIR, the launcher's part: refused before the first run when the
space a run writes is not there, and named for what it is when the disk fills during a run."""

import pytest

from tests.launch.helpers import FAKES, PREFIX


@pytest.fixture
def fake_disk(launch):
    """The launcher with the fake df and tee first on PATH."""
    for name in ("df", "tee"):
        (launch.tmp / "bin" / name).symlink_to(FAKES / name)
    return launch


def test_too_little_space_is_refused_before_anything_runs(fake_disk):
    result = fake_disk.run(NEXP="10", FAKE_DF_AVAIL_KB=str(100 * 1024))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"LOGDIR={fake_disk.logdir}: 100 MiB free" in result.stderr
    assert "NEXP=10 runs need 704 MiB" in result.stderr and "LOGDIR_MB_PER_RUN=64" in result.stderr
    assert fake_disk.calls() == []  # not even the preflight


def test_the_space_per_run_can_be_set(fake_disk):
    result = fake_disk.run(NEXP="10", FAKE_DF_AVAIL_KB=str(100 * 1024), LOGDIR_MB_PER_RUN="8")
    assert result.returncode == 0, result.stdout + result.stderr
    result = fake_disk.run(LOGDIR_MB_PER_RUN="lots")
    assert result.returncode == 2 and "LOGDIR_MB_PER_RUN=lots" in result.stderr


def test_a_disk_that_fills_during_a_run_is_named_and_stops_the_loop(fake_disk):
    result = fake_disk.run(NEXP="3", FAKE_TEE_FAIL=f"{PREFIX}_2.log", FAKE_TEE_DISK_FULL="1")
    assert result.returncode == 1, result.stdout + result.stderr
    log = fake_disk.logdir / f"{PREFIX}_2.log"
    assert f"trial 2 ({log}): disk full in LOGDIR ({fake_disk.logdir}: 0 KiB free)" in result.stderr
    assert "not converged" not in result.stderr
    assert "trial 3 not started" in result.stderr
    assert len(fake_disk.module_calls("torch.distributed.run")) == 2
    checked = [c.argv[2] for c in fake_disk.module_calls("training.scoring.compliance")]
    assert checked == [str(fake_disk.logdir / f"{PREFIX}_1.log")]  # an incomplete log is not checked


def test_a_log_write_error_on_a_disk_with_space_is_named(fake_disk):
    result = fake_disk.run(NEXP="2", FAKE_TEE_FAIL=f"{PREFIX}_1.log")
    assert result.returncode == 1, result.stdout + result.stderr
    log = fake_disk.logdir / f"{PREFIX}_1.log"
    assert f"trial 1 ({log}): the log could not be written (tee exit 1, its error above)" in result.stderr
    assert "disk full" not in result.stderr and "not converged" not in result.stderr
