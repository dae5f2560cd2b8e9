"""The node benchmark keeps working: ``python -m benchmarks node`` at a tiny count, as a
real process with a real node, producer and consumer, durable and non-durable. It checks
that the figures are sane (everything sent is confirmed and delivered once, in order), not
how fast: speed is measured by benchmark runs, never by tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.processes import ROOT

COUNT = 200


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.system
@pytest.mark.timeout(240)
def test_the_node_benchmark_delivers_every_message_in_both_modes(
    tmp_path: Path, pg_schema: str
) -> None:
    # pg_schema: the server must be there (skipped without it, failing under CI); the
    # benchmark makes a schema of its own.
    output = tmp_path / "node.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "node",
            "--count",
            str(COUNT),
            "--repeat",
            "1",
            "--seconds",
            "60",
            "--ack-every",
            "50",
            "--output",
            str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "durable" in result.stdout
    assert "non-durable" in result.stdout
    figures = json.loads(output.read_text())
    assert figures["count"] == COUNT
    assert figures["raw"]["frames_per_s"] > 0
    assert set(figures["cases"]) == {"durable", "non-durable", "durable-postgresql"}
    database = figures["cases"]["durable-postgresql"]["database_per_msg"]
    assert database["server_cpu_us_per_msg"] > 0 and database["wal_bytes_per_msg"] > 0
    for name, case in figures["cases"].items():
        mode = name.removesuffix("-postgresql")
        assert case["msgs_per_s"] > 0
        assert case["ratio_ours_to_raw"] > 0
        assert 0 < case["latency_p50_ms"] <= case["latency_p99_ms"]
        assert 0 < case["node_idle_rss"] <= case["node_peak_rss"]
        (run,) = case["runs"]
        assert run["mode"] == mode
        assert run["sent"] == run["confirmed"] == run["delivered"] == COUNT
        assert not run["time_bounded"]
        assert run["refused"] == run["out_of_order"] == run["duplicates"] == 0
        assert run["redelivered"] == 0
        assert run["latency_samples"] == COUNT
        assert run["node_exit"] is not None  # stopped by SIGTERM, not left running
        for pid in run["pids"].values():
            assert not _alive(pid), f"process {pid} of the {mode} run is still running"
