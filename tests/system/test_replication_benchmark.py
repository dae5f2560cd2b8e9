"""The replication benchmark keeps working: ``python -m benchmarks replication`` at its
smallest sizes, as real processes on the test server. It checks that the run ends well
and writes every figure, not how fast (speed is measured by benchmark runs, never by
tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.postgresql import SERVER
from tests.processes import run_benchmark


@pytest.mark.system
@pytest.mark.timeout(180)
def test_the_replication_benchmark_writes_each_figure(tmp_path: Path, pg_schema: str) -> None:
    # pg_schema: the server must be there (skipped without it, failing under CI); the
    # benchmark makes a schema of its own per pair.
    output = tmp_path / "replication.json"
    argv = ["--repeat", "1", "--count", "300", "--kills", "1", "--sync-mb", "2"]
    argv += ["--postgresql", SERVER, "--output", str(output)]
    result = run_benchmark("replication", argv, 160)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "unreplicated  replicated  ratio" in result.stdout
    figures = json.loads(output.read_text())

    throughput = figures["throughput"]
    assert set(throughput["cases"]) == {"unreplicated", "replicated"}
    for case, runs in throughput["runs"].items():
        (run,) = runs
        assert run["case"] == case
        assert run["delivered"] == run["confirmed"] == 300
        assert throughput["cases"][case]["msgs_per_s"] > 0
        assert 0 < run["latency_p50_ms"] <= run["latency_p99_ms"]
    assert set(throughput["runs"]["replicated"][0]["cpu_seconds"]) == {
        "node a",
        "node b",
        "producer",
        "consumer",
    }
    assert throughput["ratio_replicated_to_unreplicated"] > 0

    failover = figures["failover"]
    assert (failover["reap_s"], failover["ping_s"], failover["kills"]) == (2.0, 0.5, 1)
    (seconds,) = failover["seconds"]
    assert 0 < seconds == failover["p50"] == failover["max"]

    quorum = figures["failover_by_quorum"]
    assert (quorum["voters"], quorum["quorum_size"], quorum["kills"]) == (3, 2, 1)
    (seconds,) = quorum["seconds"]
    assert 0 < seconds == quorum["p50"] == quorum["max"]

    sync = figures["initial_sync"]
    assert sync["fill"]["large_messages"] == 1
    assert sync["fill"]["small_messages"] > 0
    on_live = sync["store_on_live"]
    assert on_live["large_files"] == 1
    assert on_live["large_messages"] == sync["large_message_bytes"]
    assert sync["store_bytes"] == on_live["sqlite_file"] + on_live["large_messages"]
    assert sync["store_on_backup"]["large_files"] == 1
    assert 0 <= sync["seconds_live_reported"] <= sync["seconds_from_backup_start"]
    assert sync["mb_per_s"] > 0
    assert set(sync["cpu_seconds"]) == {"node a", "node b"}

    failback = figures["failback"]
    assert failback["kills"] == 1
    assert failback["epochs"] == [3]  # a, then b, then a again
    for part in ("restart_to_live", "restart_to_confirmed", "sync_to_live", "sync_to_confirmed"):
        (seconds,) = failback[part]["seconds"]
        assert 0 < seconds == failback[part]["p50"] == failback[part]["max"]


@pytest.mark.system
@pytest.mark.timeout(120)
def test_the_quorum_part_runs_alone(tmp_path: Path) -> None:
    output = tmp_path / "replication-quorum.json"
    argv = ["--only", "quorum", "--kills", "2", "--output", str(output)]
    result = run_benchmark("replication", argv, 100)
    assert result.returncode == 0, result.stdout + result.stderr
    quorum = json.loads(output.read_text())["failover_by_quorum"]
    assert quorum["kills"] == len(quorum["seconds"]) == 2
    assert 0 < quorum["min"] <= quorum["p50"] <= quorum["max"]


@pytest.mark.system
@pytest.mark.timeout(150)
def test_the_failback_part_runs_alone(tmp_path: Path, pg_schema: str) -> None:
    output = tmp_path / "replication-failback.json"
    argv = ["--only", "failback", "--kills", "2", "--postgresql", SERVER, "--output", str(output)]
    result = run_benchmark("replication", argv, 130)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "failback (2 rounds" in result.stdout
    failback = json.loads(output.read_text())["failback"]
    assert failback["kills"] == 2
    assert failback["epochs"] == [3, 5]
    for part in ("sync_to_live", "sync_to_confirmed"):
        seconds = failback[part]["seconds"]
        assert len(seconds) == 2 and 0 < min(seconds) <= failback[part]["p50"]
        # the handover is part of the restart's seconds
        assert failback[part]["max"] <= failback[part.replace("sync", "restart")]["max"]
