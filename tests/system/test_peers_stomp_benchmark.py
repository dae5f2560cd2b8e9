"""The STOMP peers benchmark keeps working: ``python -m benchmarks peers-stomp`` at a tiny
count, with real brokers and stomp.py producer and consumer processes. It checks that
every case runs, every message is delivered once, in order and whole, ours / best peer is
worked out when a peer ran, and no broker process is left running - not how fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import psutil
import pytest

from benchmarks import peers_stomp, rabbitmq, stomp_throughput
from benchmarks.bridge_throughput import BridgeSettings, bridge_table
from bridge.config.node import AddressFullPolicy, parse_node_config
from tests.processes import ROOT

COUNT = 200
LARGE_COUNT = 2


def run_benchmark(output: Path, *arguments: str) -> dict[str, Any]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "peers-stomp",
            "--count",
            str(COUNT),
            "--repeat",
            "1",
            "--output",
            str(output),
            *arguments,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures: dict[str, Any] = json.loads(output.read_text())
    return figures


def assert_clean_run(run: dict[str, Any], count: int) -> None:
    assert "error" not in run, run["error"]
    assert run["sent"] == run["delivered"] == count
    assert run["out_of_order"] == run["duplicates"] == run["redelivered"] == 0
    assert run["wrong_size"] == 0
    assert run["peak_rss"] > 0 and run["msgs_per_s"] > 0
    faults = run["page_faults_by_process"]
    assert set(faults) == set(run["pids"]), faults
    assert all(isinstance(count, int) and count >= 0 for count in faults.values()), faults
    for name, pid in run["pids"].items():
        assert not psutil.pid_exists(pid) or (
            psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        ), f"{name} ({pid}) of the {run['broker']} {run['case']} run is still running"


@pytest.mark.system
@pytest.mark.timeout(300)
def test_every_case_runs_against_txbridge_and_the_relay(tmp_path: Path) -> None:
    """With no peer, no ours / best peer; the relay, the ceiling, runs every case too and
    gives ours / its rate."""
    figures = run_benchmark(
        tmp_path / "peers.json",
        "--brokers",
        "txbridge,relay",
        "--large-count",
        str(LARGE_COUNT),
        "--large-size",
        "64KiB",
    )
    assert figures["skipped"] == {}
    assert set(figures["cases"]) == {
        "persistent",
        "non-persistent",
        "a-to-b-persistent",
        "a-to-b-large",
    }
    for name, case in figures["cases"].items():
        for broker in ("txbridge", "relay"):
            (run,) = case["brokers"][broker]["runs"]
            assert run["case"] == name
            assert_clean_run(run, LARGE_COUNT if name == "a-to-b-large" else COUNT)
        assert case["best_peer"] is None and "ratio" not in case
        ours, relay = (case["brokers"][broker]["rate"] for broker in ("txbridge", "relay"))
        assert case["ceiling"] == relay
        assert case["ceiling_ratio"] == pytest.approx(ours / relay)
    runs = figures["cases"]["a-to-b-persistent"]["brokers"]
    assert len(runs["txbridge"]["runs"][0]["pids"]) == 4
    assert set(runs["relay"]["runs"][0]["pids"]) == {"relay A", "relay B", "producer", "consumer"}


@pytest.mark.system
@pytest.mark.timeout(300)
def test_rabbitmq_runs_beside_txbridge_and_gives_the_ratio(tmp_path: Path) -> None:
    """RabbitMQ (Debian's, installed on this kind of machine) through a private node pair
    and a shovel; ActiveMQ is not installed by default, so only the benchmark runs it."""
    peer = "rabbitmq"
    missing = rabbitmq.missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"RabbitMQ must be installed on CI: {missing}")
        pytest.skip(missing)
    figures = run_benchmark(
        tmp_path / "peers.json",
        "--brokers",
        f"txbridge,{peer}",
        "--cases",
        "a-to-b-persistent",
    )
    assert figures["skipped"] == {}
    assert set(figures["cases"]) == {"a-to-b-persistent"}
    for case in figures["cases"].values():
        for broker in ("txbridge", peer):
            (run,) = case["brokers"][broker]["runs"]
            assert_clean_run(run, COUNT)
        assert case["best_peer"] == peer
        peer_figures = case["brokers"][peer]
        ours = case["brokers"]["txbridge"]
        assert case["ratio"] == pytest.approx(ours["rate"] / peer_figures["rate"])
        assert case["rss_ratio"] == pytest.approx(ours["peak_rss"] / peer_figures["peak_rss"])


@pytest.mark.system
@pytest.mark.timeout(120)
def test_a_peer_that_is_not_installed_is_skipped_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(peers_stomp.MISSING, "activemq", lambda: "ActiveMQ is not here")
    output = tmp_path / "peers.json"
    status = peers_stomp.main(
        [
            "--brokers",
            "txbridge,activemq",
            "--cases",
            "non-persistent",
            "--count",
            str(COUNT),
            "--repeat",
            "1",
            "--output",
            str(output),
        ]
    )
    assert status == 0
    assert "skipping activemq: ActiveMQ is not here" in capsys.readouterr().out
    figures = json.loads(output.read_text())
    assert figures["skipped"] == {"activemq": "ActiveMQ is not here"}
    case = figures["cases"]["non-persistent"]
    assert set(case["brokers"]) == {"txbridge"}
    assert_clean_run(case["brokers"]["txbridge"]["runs"][0], COUNT)


def test_the_best_peer_is_the_fastest_that_did_not_fail() -> None:
    case = peers_stomp.CASES["persistent"]

    def good(rate: float, rss: int) -> dict[str, Any]:
        return {
            "msgs_per_s": rate,
            "mb_per_s": 0.0,
            "peak_rss": rss,
            "cpu_seconds": 1.0,
            "delivered": 1000,
            "time_bounded": False,
        }

    results = {
        "txbridge": peers_stomp.summary(case, [good(300.0, 10), good(100.0, 30), good(200.0, 20)]),
        "rabbitmq": peers_stomp.summary(case, [good(100.0, 90)]),
        "activemq": peers_stomp.summary(case, [{"error": "Java heap space"}]),
    }
    assert results["txbridge"]["rate"] == 200.0 and results["txbridge"]["peak_rss"] == 30
    assert results["activemq"] == {
        "runs": [{"error": "Java heap space"}],
        "failed": 1,
        "error": "Java heap space",
    }
    against_rabbitmq = {
        "best_peer": "rabbitmq",
        "ratio": 2.0,
        "rss_ratio": pytest.approx(1 / 3),
        "goal_met": True,
        "goal_rate": 150.0,
    }
    assert peers_stomp.compare(results) == against_rabbitmq
    assert peers_stomp.cell(results["activemq"]) == "failed: Java heap space"
    # The relay is the ceiling, never the best peer, however fast.
    results["relay"] = peers_stomp.summary(case, [good(400.0, 5)])
    assert peers_stomp.compare(results) == {
        **against_rabbitmq,
        "ceiling": 400.0,
        "ceiling_ratio": 0.5,
        "goal_under_ceiling": True,
    }


def test_a_runs_bounds_are_worked_out_from_its_processes_cpu() -> None:
    """1,000 messages in 2 s on 2 cores, the broker taking 1.5 CPU s and the clients 0.5
    and 1.0: 3 of 4 core-seconds busy; 1,000 per 1.5 core-seconds if every core were busy;
    the consumer alone full at 1,000 per second."""
    figures = peers_stomp.bounds(1000, 2.0, 1.5, (0.5, 1.0), 1.0, cores=2)
    assert figures == {
        "cpu_bound_rate": pytest.approx(1000 * 2 / 3.0),
        "machine_busy": pytest.approx(0.75),
        "client_ceiling": pytest.approx(1000.0),
    }
    large = peers_stomp.bounds(100, 4.0, 3.0, (1.0, 2.0), 10.485_76, cores=2)
    assert large["cpu_bound_rate"] == pytest.approx(100 * 10.485_76 * 2 / 6.0)
    assert large["client_ceiling"] == pytest.approx(100 * 10.485_76 / 2.0)
    assert peers_stomp.bounds(0, 0.0, 0.0, (0.0, 0.0), 1.0, cores=2) == {
        "cpu_bound_rate": 0.0,
        "machine_busy": 0.0,
        "client_ceiling": 0.0,
    }


def test_the_bounds_table_names_the_goal_and_each_brokers_bounds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = peers_stomp.CASES["persistent"]

    def run(rate: float, broker_cpu: float) -> dict[str, Any]:
        return {
            "msgs_per_s": rate,
            "mb_per_s": 0.0,
            "peak_rss": 10,
            "cpu_seconds": broker_cpu,
            "delivered": 100_000,
            "time_bounded": False,
            "client_cpu_seconds": {"producer": 1.0, "consumer": 2.0},
            **peers_stomp.bounds(100_000, 100_000 / rate, broker_cpu, (1.0, 2.0), 1.0, cores=2),
        }

    faulted = {
        **run(20_000.0, 3.0),
        "page_faults_by_process": {"node A": 1_500, "node B": 500, "producer": 7, "consumer": 90},
    }
    results = {
        "txbridge": peers_stomp.summary(case, [faulted]),
        "rabbitmq": peers_stomp.summary(case, [run(10_000.0, 6.0)]),  # (a run of before)
    }
    report = {
        "persistent": {"title": case.title, "brokers": results, **peers_stomp.compare(results)}
    }
    peers_stomp.print_bounds(report, ["txbridge", "rabbitmq"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[2] == (
        "| one node, persistent (goal 15,000 msgs/s) | txbridge | 20,000 msgs/s "
        "| 3.0 / 1.0 / 2.0 | 60% | 33,333 msgs/s | 50,000 msgs/s | 2,000 / 7 / 90 |"
    )
    assert lines[3] == (
        "|  | rabbitmq | 10,000 msgs/s | 6.0 / 1.0 / 2.0 | 45% | 22,222 msgs/s | 50,000 msgs/s "
        "| - |"
    )


def test_an_unknown_case_or_broker_is_refused_with_the_known_ones_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        peers_stomp.main(["--cases", "a-to-b", "--brokers", "txbridge,kafka"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "unknown broker or case: kafka, a-to-b" in error
    assert "cases: persistent, non-persistent, a-to-b-persistent, a-to-b-large" in error


@pytest.mark.parametrize("empty", ["--cases", "--brokers"])
def test_no_case_or_no_broker_is_refused(empty: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        peers_stomp.main([empty, ","])
    assert exit_info.value.code == 2
    assert "--cases and --brokers each name at least one" in capsys.readouterr().err


@pytest.mark.system
@pytest.mark.timeout(300)
def test_counting_calls_runs_the_nodes_under_cprofile_and_counts_per_message(
    tmp_path: Path,
) -> None:
    """``--count-calls``: each node writes its statistics as it stops (``txbridge node
    --profile``), and the run gives the calls each made per message, Python functions
    and all; the messages arrive as in any run."""
    figures = run_benchmark(
        tmp_path / "calls.json",
        "--brokers",
        "txbridge",
        "--cases",
        "persistent,a-to-b-persistent",
        "--count-calls",
    )
    assert figures["count_calls"] is True
    processes = {"persistent": {"node"}, "a-to-b-persistent": {"node A", "node B"}}
    for name, case in figures["cases"].items():
        (run,) = case["brokers"]["txbridge"]["runs"]
        assert_clean_run(run, COUNT)
        calls = run["calls_per_message_by_process"]
        assert set(calls) == processes[name]
        for counted in calls.values():
            # A node makes Python calls for every message it passes on, and C calls too.
            assert 10 < counted["python"] < counted["all"], counted


@pytest.mark.system
@pytest.mark.timeout(300)
def test_the_bridge_runs_without_duplicate_detection_when_asked(tmp_path: Path) -> None:
    """``--txbridge-no-duplicate-detection``: the bridge leaves its ids out (the variant
    that measures what they cost), and every message still arrives once, in order."""
    figures = run_benchmark(
        tmp_path / "variant.json",
        "--brokers",
        "txbridge",
        "--cases",
        "a-to-b-persistent",
        "--txbridge-no-duplicate-detection",
    )
    assert figures["txbridge_duplicate_detection"] is False
    (run,) = figures["cases"]["a-to-b-persistent"]["brokers"]["txbridge"]["runs"]
    assert_clean_run(run, COUNT)


@pytest.mark.system
@pytest.mark.timeout(300)
def test_the_clients_run_with_a_tuned_allocator_when_asked(tmp_path: Path) -> None:
    """``--tuned-clients``: both stomp.py processes raise glibc's thresholds first (a
    variant, named in the JSON), and the large messages still arrive whole and in order."""
    figures = run_benchmark(
        tmp_path / "variant.json",
        "--brokers",
        "txbridge",
        "--cases",
        "a-to-b-large",
        "--large-count",
        str(LARGE_COUNT),
        "--large-size",
        "5MiB",
        "--tuned-clients",
    )
    assert figures["tuned_clients"] is True
    (run,) = figures["cases"]["a-to-b-large"]["brokers"]["txbridge"]["runs"]
    assert_clean_run(run, LARGE_COUNT)


def test_a_client_refuses_to_run_where_the_allocator_cannot_be_tuned(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(stomp_throughput, "tune_allocator", lambda *thresholds: False)
    assert (
        stomp_throughput._client_main(
            "producer", ["--port", "1", "--count", "1", "--tune-allocator"]
        )
        == 1
    )
    assert "the allocator's thresholds cannot be set here" in capsys.readouterr().out


@pytest.mark.system
@pytest.mark.timeout(300)
def test_the_block_variant_bounds_the_address_and_is_saved_apart(tmp_path: Path) -> None:
    """``--txbridge-block SIZE``: every node's address under BLOCK at SIZE, the variant
    named in the JSON, which goes to its own file unless ``--output`` says where."""
    figures = run_benchmark(
        tmp_path / "peers.json",
        "--brokers",
        "txbridge",
        "--cases",
        "persistent,a-to-b-persistent",
        "--txbridge-block",
        "16KiB",
    )
    assert figures["txbridge_block"] == "16KiB"
    for case in figures["cases"].values():
        (run,) = case["brokers"]["txbridge"]["runs"]
        assert_clean_run(run, COUNT)


def test_the_block_variant_configures_every_node_and_the_default_does_not() -> None:
    plain = peers_stomp.Options(1, 1, 1, 1.0, None)
    blocked = peers_stomp.Options(1, 1, 1, 1.0, None, block="1MiB")
    for core in (False, True):
        (address,) = parse_node_config(
            tomllib.loads(peers_stomp.txbridge_config("a", blocked, core=core)), Path("n.toml")
        ).addresses
        assert address.overrides.max_size_bytes == 1024 * 1024
        assert address.overrides.address_full_policy is AddressFullPolicy.BLOCK
        (address,) = parse_node_config(
            tomllib.loads(peers_stomp.txbridge_config("a", plain, core=core)), Path("n.toml")
        ).addresses
        assert address.overrides.max_size_bytes is None
        assert address.overrides.address_full_policy is None


def test_a_block_size_that_is_not_a_size_is_refused_by_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        peers_stomp.main(["--txbridge-block", "lots"])
    assert "--txbridge-block: expected" in capsys.readouterr().err


@pytest.mark.parametrize("detection", [True, False])
def test_the_bridge_table_says_whether_it_detects_duplicates(detection: bool) -> None:
    table = bridge_table("tcp://127.0.0.1:1", BridgeSettings(duplicate_detection=detection))
    config = tomllib.loads(table)
    assert config["bridge"][0]["use-duplicate-detection"] is detection


def test_callgrind_runs_each_node_under_valgrind_and_reads_its_totals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--callgrind DIR``: each node's command runs under valgrind's callgrind, its
    output named by case and node in DIR, and the run reads the instructions each
    counted from its ``totals`` line (a missing output is an error, not a zero)."""
    started: list[tuple[Path, list[str]]] = []

    class Node:
        pid = 1

        def stop(self, *args: object) -> None:
            pass

    def start(directory: Path, *args: Any, prefix: list[str]) -> tuple[Node, dict[str, int]]:
        started.append((directory, list(prefix)))
        return Node(), {"stomp": 1, "core": 2}

    monkeypatch.setattr(peers_stomp, "start_node_ports", start)
    options = peers_stomp.Options(
        count=10,
        large_count=1,
        large_size=1,
        seconds=1.0,
        txbridge_max_frame_size=None,
        callgrind=tmp_path / "traces",
    )
    case = peers_stomp.CASES["a-to-b-persistent"]
    deployment = peers_stomp.deploy_txbridge(case, tmp_path, None, 0.0, options)  # type: ignore[arg-type]
    traces = {
        "node A": tmp_path / "traces" / "a-to-b-persistent-node-A.out",
        "node B": tmp_path / "traces" / "a-to-b-persistent-node-B.out",
    }
    assert deployment.traces == traces
    assert [prefix for _, prefix in started] == [
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={traces[name]}"]
        for name in ("node B", "node A")
    ]
    traces["node A"].parent.mkdir()
    traces["node A"].write_text("events: Ir\nsummary: 1200\ntotals: 1234\n")
    with pytest.raises(RuntimeError, match="node B wrote no callgrind output"):
        peers_stomp.instructions(traces)
    traces["node B"].write_text("events: Ir\ntotals: 99\n")
    assert peers_stomp.instructions(traces) == {"node A": 1234, "node B": 99}


def test_the_table_gives_ours_over_the_relay_and_whether_the_goal_is_under_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = peers_stomp.CASES["non-persistent"]

    def run(rate: float) -> dict[str, Any]:
        return {
            "msgs_per_s": rate,
            "mb_per_s": 0.0,
            "peak_rss": 64 * 1024 * 1024,
            "cpu_seconds": 1.0,
            "delivered": 100_000,
            "time_bounded": False,
        }

    results = {
        broker: peers_stomp.summary(case, [run(rate)])
        for broker, rate in (("txbridge", 30_000.0), ("rabbitmq", 25_000.0), ("relay", 36_000.0))
    }
    report = {"non-persistent": {"title": case.title, "brokers": results}}
    report["non-persistent"].update(peers_stomp.compare(results))
    peers_stomp.print_table(report, ["txbridge", "rabbitmq", "relay"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].endswith("| ours / relay | goal under the relay |")
    # the goal, 1.5 x 25,000, is above what the relay reached
    assert lines[2].endswith("| 1.20 | 1.00 | 0.83 | no |")
