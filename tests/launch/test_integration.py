"""run_with_docker.sh (CONTAINER_RUNTIME=none) with the real compliance checker and scorer: only the
preflight and the trainer are faked, the trainer printing a complete BERT MLLOG log (converged, or
stopped before any evaluation)."""

import sys

import pytest

from tests.launch.helpers import PREFIX

SHIM = """#!/usr/bin/env bash
# PYTHON for this test: a fake preflight and trainer, the real interpreter for everything else.
set -euo pipefail
case "$1 $2" in
  "-m training.preflight") exit 0 ;;
  "-m torch.distributed.run")
    {python} -c 'from tests.scoring import scoring_logs as s; print("\\n".join(s.bert_log_lines({log})))'
    exit {rc} ;;
  *) exec {python} "$@" ;;
esac
"""


@pytest.mark.slow
def test_real_compliance_and_scoring(launch):
    pytest.importorskip("mlperf_logging")
    shim = launch.tmp / "python-shim"
    shim.write_text(SHIM.format(python=sys.executable, log="", rc=0))
    shim.chmod(0o755)
    result = launch.run(NEXP="2", PYTHON=str(shim))
    assert result.returncode == 0, result.stdout + result.stderr
    for i in (1, 2):
        report = (launch.logdir / f"{PREFIX}_{i}.compliance.txt").read_text()
        assert "SUCCESS" in report, report
    assert (launch.logdir / "summary.md").exists() and (launch.logdir / "summary.json").exists()
    assert f"{PREFIX}_1" in result.stdout  # the summary table printed at the end names the runs


def test_a_run_without_an_evaluation_is_summarised_so(launch):
    """A run that stopped before its first evaluation (its trainer exits 1, writing no outcome): the summary's
    verdict says that no evaluation ran, and nothing says eval_accuracy nan."""
    pytest.importorskip("mlperf_logging")
    shim = launch.tmp / "python-shim"
    shim.write_text(SHIM.format(python=sys.executable, log='status="aborted", evals=()', rc=1))
    shim.chmod(0o755)
    result = launch.run(PYTHON=str(shim))
    assert result.returncode == 1, result.stdout + result.stderr
    summary = (launch.logdir / "summary.md").read_text()
    assert f"| {PREFIX}_1.log | not converged (aborted): no evaluation ran |" in summary
    assert "nan" not in summary and "nan" not in result.stderr
