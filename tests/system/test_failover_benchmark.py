"""The failover benchmark keeps working: ``python -m benchmarks failover`` with two kills
at a short reap time, as real processes on the test server. It checks that the run ends
well, alternates the pair and writes one figure per kill, not how fast (speed is measured
by benchmark runs, never by tests); and the nearest-rank percentiles on known values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.failover import percentiles
from tests.postgresql import SERVER
from tests.processes import run_benchmark


def test_percentiles_take_the_nearest_rank() -> None:
    figures = percentiles([float(n) for n in range(100, 0, -1)])
    assert figures == {"p50": 50.5, "p90": 90.0, "p99": 99.0, "max": 100.0, "min": 1.0}
    assert percentiles([3.0]) == {"p50": 3.0, "p90": 3.0, "p99": 3.0, "max": 3.0, "min": 3.0}


@pytest.mark.system
@pytest.mark.timeout(240)
def test_the_failover_benchmark_times_each_kill(tmp_path: Path, pg_schema: str) -> None:
    # pg_schema: the server must be there (skipped without it, failing under CI); the
    # benchmark makes a schema of its own.
    output = tmp_path / "failover.json"
    argv = ["--kills", "2", "--reap", "1", "--postgresql", SERVER, "--output", str(output)]
    argv += ["--throughput-count", "500", "--throughput-repeat", "1"]
    result = run_benchmark("failover", argv, 200)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reap 1s kill 2/2" in result.stdout
    figures = json.loads(output.read_text())
    throughput = figures["store_throughput"]
    assert [len(throughput["runs"][store]) for store in ("sqlite", "postgresql")] == [1, 1]
    assert all(rate > 0 for rate in throughput["msgs_per_s"].values())
    assert throughput["database_per_msg"]["wal_bytes_per_msg"] > 0
    (case,) = figures["cases"]
    assert (case["reap_s"], case["ping_s"], case["query_timeout_s"]) == (1.0, 0.25, 0.125)
    assert len(case["seconds"]) == 2
    assert all(seconds > 0 for seconds in case["seconds"])
