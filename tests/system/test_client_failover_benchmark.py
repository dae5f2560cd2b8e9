"""The client-failover benchmark keeps working: ``python -m benchmarks client-failover``
with one short run, as real processes. It checks that the run ends well and writes its
figures, with nothing lost and no unflagged repeat; not how fast (speed is measured by
benchmark runs, never by tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.processes import run_benchmark
from tests.system.audit_run import require_spark


@pytest.mark.system
@pytest.mark.timeout(300)
def test_the_client_failover_benchmark_writes_its_figures(tmp_path: Path) -> None:
    require_spark()
    output = tmp_path / "client_failover.json"
    argv = ["--runs", "1", "--count", "1200", "--kill-after", "400", "--output", str(output)]
    result = run_benchmark("client-failover", argv, 280)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(output.read_text())
    [run] = figures["runs"]
    assert run["confirmed"] == 1200 and run["send_errors"] == 0
    assert (run["lost"], run["unexpected"], run["unflagged_repeats"]) == (0, 0, 0)
    assert run["in_flight"] >= 0
    for key in ("kill_to_live_s", "live_to_first_delivery_s", "kill_to_first_delivery_s"):
        assert set(figures[key]) == {"median", "max", "min"}
