"""The scenario registry of ``txbridge bench``, and the bridge scenarios end to end at a
size that takes seconds: real node processes A and B with a core bridge between them,
traced producer and consumer processes writing event logs, faults injected, the audit on
Spark, the headline printed, and nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from benchmarks import scenarios
from benchmarks.scenarios.bridged import schedule
from bridge import events
from bridge.ctl.main import main as txbridge
from tests.audit.conftest import require_spark
from tests.processes import ROOT

BIN = Path(sys.executable).parent


def test_without_a_scenario_the_usage_lists_them_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert txbridge(["bench"]) == 2
    usage = capsys.readouterr().err
    for name in ("node", "bridge", "large", "faults"):
        assert f"  {name} " in usage
    assert "not yet" not in usage


@pytest.mark.parametrize("name", ["node", "bridge", "large", "faults"])
def test_each_scenario_has_the_common_options(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        txbridge(["bench", name, "--help"])
    help_text = capsys.readouterr().out
    for option in ("--out", "--messages", "--size"):
        assert option in help_text


def test_a_bad_fault_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        scenarios.main(["faults", "--faults", "kill-a,unplug"])
    assert "--faults takes kill-a,drop-bridge,drop-producers" in capsys.readouterr().err


def test_the_fault_schedule_spreads_the_rounds_over_the_messages() -> None:
    assert schedule(["kill-a", "drop-bridge"], 2, 1000) == [
        (200, "kill-a"),
        (400, "drop-bridge"),
        (600, "kill-a"),
        (800, "drop-bridge"),
    ]


def _running_in(folder: Path) -> list[str]:
    found = []
    for process in psutil.process_iter(["pid", "cwd", "cmdline"]):
        cwd = process.info["cwd"] or ""
        cmdline = " ".join(process.info["cmdline"] or [])
        if cwd.startswith(str(folder)) or str(folder) in cmdline:
            found.append(f"{process.info['pid']}: {cmdline}")
    return found


def _bench(out: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    require_spark()
    return subprocess.run(
        [str(BIN / "txbridge"), "bench", *argv, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _audited(result: subprocess.CompletedProcess[str], out: Path, messages: int) -> dict:
    """The run ended well, its headline says nothing lost or duplicated, and its report
    counts every message once, confirmed by node a and received from node b."""
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = dict(line.split("  ", 1) for line in result.stdout.splitlines() if "  " in line)
    assert lines["lost"].strip() == "0"
    assert lines["duplicated"].strip() == "0"
    assert f"report: {out / 'report' / 'index.html'}" in result.stdout
    report = json.loads((out / "report" / "report.json").read_text())
    delivery = report["delivery"]
    assert delivery["confirmed"] == delivery["received"] == messages
    assert delivery["lost"] == delivery["duplicated"] == delivery["unexpected"] == 0
    assert delivery["order_violations"] == 0
    assert delivery["per_node"] == {"a": {"confirmed": messages, "lost": 0}}
    assert report["latency"]["overall"]["count"] == messages
    rss = report["rss"]["per_process"]
    assert {"node-a", "node-b"} <= set(rss)
    assert (out / "report" / "index.html").is_file()
    assert _running_in(out) == []
    return report


def _processes(out: Path) -> set[str]:
    (run,) = [p.name for p in (out / events.EVENTS_DIR).iterdir()]
    return {p.name for p in (out / events.EVENTS_DIR / run).iterdir()}


@pytest.mark.system
@pytest.mark.timeout(300)
def test_the_bridge_scenario_runs_and_audits(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = _bench(
        out, "bridge", "--messages", "400", "--size", "100", "--ack-every", "50",
        "--producers", "2", "--consumers", "2",
    )  # fmt: skip
    report = _audited(result, out, 400)
    assert set(report["delivery"]["per_producer"]) == {"producer-0", "producer-1"}
    # The runner's log is there too, and empty: no fault in this scenario.
    assert _processes(out) - {"process=runner"} == {
        f"process={name}"
        for name in ("producer-0", "producer-1", "consumer-0", "consumer-1", "node-a", "node-b")
    }
    assert events.FAULT_INJECTED not in report["per_kind"]


@pytest.mark.system
@pytest.mark.timeout(300)
def test_the_large_scenario_streams_through_the_bridge_to_a_slow_consumer(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    result = _bench(out, "large", "--messages", "6", "--size", "1MiB", "--rate", "10MB")
    report = _audited(result, out, 6)
    assert "the consumer is slow: 10 MB/s" in result.stdout
    # Six 1 MiB messages at 10 MB/s: the consumer took at least half a second.
    assert report["rss"]["per_process"]["node-a"]["peak_bytes"] < 100 * 1024 * 1024


@pytest.mark.system
@pytest.mark.timeout(300)
def test_the_faults_scenario_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = _bench(out, "faults", "--messages", "1500", "--rounds", "1")
    report = _audited(result, out, 1500)
    assert report["per_kind"][events.FAULT_INJECTED] == 3
    assert "fault: kill -9 of node a" in result.stdout
    assert "the bridge's connection to b" in result.stdout
    assert "process=runner" in _processes(out)


def test_a_driver_that_says_done_and_exits_between_two_polls_has_done_its_part(
    tmp_path: Path,
) -> None:
    """The runner polls its drivers every 50 ms: one that prints ``done`` and exits in
    between is read to its ``done`` first; only polling it again says it ended."""
    from benchmarks.node_throughput import BenchmarkError, Child
    from benchmarks.scenarios.node import _events

    child = Child(
        "the producer",
        [sys.executable, "-c", 'print(\'{"event": "done", "sent": 3}\')'],
        tmp_path,
        tmp_path / "producer.stderr",
    )
    child.process.wait(timeout=30)
    child._reader.join(timeout=30)
    assert [event["event"] for event in _events(child)] == ["done"]
    with pytest.raises(BenchmarkError, match=r"the producer exited \(0\)"):
        _events(child)
