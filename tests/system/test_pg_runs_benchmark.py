"""The PostgreSQL runs benchmark keeps working: ``python -m benchmarks pg-runs`` on the
test server, as a real process. It checks that each case runs and writes its figures,
not how fast (speed is measured by benchmark runs, never by tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.pg_runs import CASES
from tests.postgresql import SERVER
from tests.processes import run_benchmark


@pytest.mark.system
@pytest.mark.timeout(120)
def test_the_pg_runs_benchmark_writes_each_case(tmp_path: Path, pg_schema: str) -> None:
    # pg_schema: the server must be there (skipped without it, failing under CI); the
    # benchmark makes a schema of its own per run.
    output = tmp_path / "pg_runs.json"
    argv = ["--messages", "300", "--burst", "50", "--repeat", "2"]
    argv += ["--postgresql", SERVER, "--output", str(output)]
    result = run_benchmark("pg-runs", argv, 100)
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(output.read_text())
    assert (figures["messages"], figures["burst"]) == (300, 50)
    for case in CASES:
        runs = figures["cases"][case]["runs"]
        assert len(runs) == 2 and all(rate > 0 for rate in runs)
        assert case in result.stdout
