"""run_with_docker.sh (CONTAINER_RUNTIME=none) with the real compliance checker and scorer: only the
preflight and the trainer are faked, the trainer printing a complete, converged BERT MLLOG log."""

import sys

import pytest

from tests.launch.helpers import PREFIX

SHIM = """#!/usr/bin/env bash
# PYTHON for this test: a fake preflight and trainer, the real interpreter for everything else.
set -euo pipefail
case "$1 $2" in
  "-m training.preflight") exit 0 ;;
  "-m torch.distributed.run")
    exec {python} -c 'from tests.scoring import scoring_logs as s; print("\\n".join(s.bert_log_lines()))' ;;
  *) exec {python} "$@" ;;
esac
"""


@pytest.mark.slow
def test_real_compliance_and_scoring(launch):
    pytest.importorskip("mlperf_logging")
    shim = launch.tmp / "python-shim"
    shim.write_text(SHIM.format(python=sys.executable))
    shim.chmod(0o755)
    result = launch.run(NEXP="2", PYTHON=str(shim))
    assert result.returncode == 0, result.stdout + result.stderr
    for i in (1, 2):
        report = (launch.logdir / f"{PREFIX}_{i}.compliance.txt").read_text()
        assert "SUCCESS" in report, report
    assert (launch.logdir / "summary.md").exists() and (launch.logdir / "summary.json").exists()
    assert f"{PREFIX}_1" in result.stdout  # the summary table printed at the end names the runs
