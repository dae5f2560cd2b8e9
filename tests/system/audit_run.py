"""The audit pipeline run on a system test's event logs, in its own process, for the
tests that check a run with it (kill -9 under core and under STOMP)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.audit.conftest import spark_missing
from tests.processes import ROOT


def require_spark() -> None:
    """Skip where Spark cannot run (a laptop without Java); fail on CI."""
    missing = spark_missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Spark cannot run on CI: {missing}")
        pytest.skip(missing)


def audit(run_dir: Path) -> dict[str, Any]:
    """``python -m bridge.audit`` on local[2], in its own process: the report's figures."""
    out = run_dir / "report"
    result = subprocess.run(
        [sys.executable, "-m", "bridge.audit", str(run_dir), "--master", "local[2]"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report
