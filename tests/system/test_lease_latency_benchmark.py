"""The lease-latency benchmark keeps working: ``python -m benchmarks lease-latency`` times
each lease call through a delaying proxy on a schema of its own and saves its JSON. It
checks that the figures are there and sane (no call beats one round trip), not what they
are: the round trips themselves are counted in tests/ha/test_lease_round_trips.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.postgresql import SERVER
from tests.processes import run_benchmark


@pytest.mark.system
def test_lease_latency_times_each_call_and_saves_json(tmp_path: Path, pg_schema: str) -> None:
    # pg_schema: the server must be there (skipped without it, failing under CI); the
    # benchmark makes and drops a schema of its own
    output = tmp_path / "lease_latency.json"
    argv = ["--rtt", "10ms", "--repeat", "2", "--postgresql", SERVER, "--output", str(output)]
    done = run_benchmark("lease-latency", argv, 120)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(output.read_text())
    assert set(report["median_seconds"]) == {"acquire", "renew", "waiting"}
    for call, times in report["runs"].items():
        assert len(times) == 2, call
        assert min(times) >= 0.01, (call, times)  # one round trip at least
    assert "renew" in done.stdout and "round trips of 10 ms" in done.stdout
