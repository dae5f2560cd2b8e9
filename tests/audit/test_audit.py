"""The audit on generated logs with known answers, on Spark in local mode: every figure of
report.json checked against an independent computation in plain Python."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from bridge import events
from bridge.audit.pipeline import audit
from tests.audit.logs import MS, RunLog


def _nearest_rank(values: list[float], fraction: float) -> float:
    """The smallest value with at least ``fraction`` of the values at or below it."""
    ordered = sorted(values)
    for count, value in enumerate(ordered, start=1):
        if count >= fraction * len(ordered):
            return value
    raise AssertionError("no values")


@pytest.mark.parametrize("format", ["parquet", "jsonl"])
def test_delivery_figures_with_injected_losses_duplicates_reorders_and_unknowns(
    spark: Any, tmp_path: Path, format: str
) -> None:
    log = RunLog(tmp_path, format=format)
    for seq in range(10):
        receipts: tuple[float, ...] = (seq * 100 + 5,)
        if seq == 3:
            receipts = ()  # lost: confirmed by node a, never received
        elif seq == 5:
            receipts = (505, 506)  # duplicated
        elif seq == 7:
            receipts = (820,)  # received after seq 8 (at 805): an order violation
        log.message("p0", seq, seq * 100, receipts=receipts)
    log.message("p1", 0, 10, node="b")  # lost, confirmed by node b
    log.message("p1", 1, 20, node="b", receipts=(30,))
    log.message("p1", 2, 30, outcome=events.SEND_UNKNOWN, receipts=(40,))  # recovered
    log.message("p1", 3, 40, outcome=events.SEND_FAILED, receipts=(50,))  # recovered
    log.message("p1", 4, 50, outcome=events.SEND_UNKNOWN)  # unknown, not lost
    log.message("p1", 5, 60, outcome=None, receipts=(70,))  # no outcome logged: recovered
    log.add("consumer-0", events.RECEIVED, 80, "ghost", 0)  # never attempted
    log.add("consumer-0", events.RECEIVED, 81)  # names no producer: unexpected too
    log.add("consumer-0", events.ACKED, 82, "p1", 1)
    log.close()

    report = audit(spark, tmp_path)

    d = report["delivery"]
    assert {key: d[key] for key in d if isinstance(d[key], int)} == {
        "attempted": 16,
        "confirmed": 12,
        "failed": 1,
        "unknown": 3,
        "received": 15,
        "deliveries": 16,
        "lost": 2,
        "unexpected": 2,
        "duplicated": 1,
        "duplicate_deliveries": 1,
        "recovered": 3,
        "recovered_failed": 1,
        "recovered_unknown": 2,
        "order_violations": 1,
        "unidentified_receipts": 1,
    }
    assert d["per_producer"]["p0"] == {
        "attempted": 10,
        "confirmed": 10,
        "failed": 0,
        "unknown": 0,
        "received": 9,
        "deliveries": 10,
        "lost": 1,
        "unexpected": 0,
        "duplicated": 1,
        "duplicate_deliveries": 1,
        "recovered": 0,
        "recovered_failed": 0,
        "recovered_unknown": 0,
        "order_violations": 1,
    }
    p1 = d["per_producer"]["p1"]
    assert (p1["attempted"], p1["lost"], p1["recovered"], p1["order_violations"]) == (6, 1, 3, 0)
    assert d["per_producer"]["ghost"]["unexpected"] == 1
    assert d["per_node"] == {"a": {"confirmed": 10, "lost": 1}, "b": {"confirmed": 2, "lost": 1}}
    assert d["examples"]["lost"] == [{"producer": "p0", "seq": 3}, {"producer": "p1", "seq": 0}]
    assert d["examples"]["duplicated"] == [{"producer": "p0", "seq": 5}]
    assert d["examples"]["unexpected"] == [{"producer": "ghost", "seq": 0}]
    assert [e["seq"] for e in d["examples"]["recovered"]] == [2, 3, 5]
    assert d["unidentified"] == {"received": 1}
    assert report["per_kind"][events.ACKED] == 1
    assert report["runs"] == ["r1"]
    assert report["processes"] == ["consumer-0", "producer-p0", "producer-p1"]
    assert report["skipped"] == {"total": 0, "files": {}}
    assert json.loads((tmp_path / "report" / "report.json").read_text())["delivery"] == d


def test_latency_throughput_pauses_rss_and_faults(spark: Any, tmp_path: Path) -> None:
    chooser = random.Random(8)
    log = RunLog(tmp_path)
    latencies: dict[int, list[float]] = {}
    sent: dict[int, int] = {}
    received: dict[int, int] = {}
    for seq in range(1500):
        at = seq * 4.0  # 250 per second, seconds 0 to 5
        latency = chooser.choice([1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 250.0, 1200.0])
        log.message("p0", seq, at, receipts=(at + latency,))
        second = int((at + latency) // 1000)
        latencies.setdefault(second, []).append(latency)
        sent[int(at // 1000)] = sent.get(int(at // 1000), 0) + 1
        received[second] = received.get(second, 0) + 1
    log.add("producer-p0", events.FLOW_PAUSED, 1000, detail="confirmation-window")
    log.add("producer-p0", events.FLOW_RESUMED, 1500)
    log.add("producer-p0", events.FLOW_PAUSED, 3200, detail="connection")
    log.add("producer-p0", events.FLOW_RESUMED, 4700)
    log.add("consumer-0", events.FLOW_PAUSED, 6000)  # never resumed: open to the end
    for at, size in ((0, 100 * MS), (1500, 150 * MS), (2200, 120 * MS)):
        log.add("node-a", events.RSS_SAMPLE, at, size=size)
    log.add("node-a", events.FAULT_INJECTED, 2000, node="a", detail="kill -9")
    log.add("node-a", events.RSS_SAMPLE, 8000, size=90 * MS)
    log.close()

    report = audit(spark, tmp_path)

    every = [value for values in latencies.values() for value in values]
    overall = report["latency"]["overall"]
    for name, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)):
        assert overall[name] == pytest.approx(_nearest_rank(every, fraction)), name
    assert overall["max"] == max(every)
    assert overall["mean"] == pytest.approx(sum(every) / len(every))
    assert overall["count"] == 1500
    assert report["latency"]["negative"] == 0
    per_second = {row["second"]: row for row in report["latency"]["per_second"]}
    assert set(per_second) == set(latencies)
    for second, values in latencies.items():
        assert per_second[second]["count"] == len(values)
        assert per_second[second]["p99"] == pytest.approx(_nearest_rank(values, 0.99))
        assert per_second[second]["max"] == max(values)
    assert sum(bucket["count"] for bucket in report["latency"]["histogram"]) == 1500
    for bucket in report["latency"]["histogram"]:
        inside = [v for v in every if bucket["from_ms"] <= v * 1.000001 < bucket["to_ms"]]
        assert len(inside) == bucket["count"]

    throughput = report["throughput"]
    rows = throughput["per_second"]
    assert [row["second"] for row in rows] == list(range(max(received) + 1))
    assert {row["second"]: row["sent"] for row in rows if row["sent"]} == sent
    assert {row["second"]: row["received"] for row in rows if row["received"]} == received
    assert [row["confirmed"] for row in rows] == [row["sent"] for row in rows]
    assert throughput["sent_per_s"] == pytest.approx(1500 / 5.996)

    pauses = report["pauses"]
    assert (pauses["count"], pauses["unclosed"]) == (3, 1)
    # Unclosed: from 6.0 s to the run's last event (8.0 s).
    assert pauses["total_s"] == pytest.approx(0.5 + 1.5 + 2.0)
    assert pauses["max_s"] == pytest.approx(2.0)
    assert pauses["per_process"]["producer-p0"] == {
        "count": 2,
        "total_s": pytest.approx(2.0),
        "max_s": pytest.approx(1.5),
        "unclosed": 0,
    }
    assert pauses["paused_per_second"] == {
        "consumer-0": [[6, pytest.approx(1.0)], [7, pytest.approx(1.0)]],
        "producer-p0": [[1, pytest.approx(0.5)], [3, pytest.approx(0.8)], [4, pytest.approx(0.7)]],
    }
    assert [(p["start_s"], p["why"]) for p in pauses["longest"]] == [
        (6.0, None),
        (3.2, "connection"),
        (1.0, "confirmation-window"),
    ]

    node = report["rss"]["per_process"]["node-a"]
    assert (node["samples"], node["peak_bytes"], node["first_bytes"], node["last_bytes"]) == (
        4,
        150 * MS,
        100 * MS,
        90 * MS,
    )
    assert node["per_second"] == [[0, 100 * MS], [1, 150 * MS], [2, 120 * MS], [8, 90 * MS]]
    assert report["faults"] == [
        {"second": 2.0, "process": "node-a", "node": "a", "what": "kill -9"}
    ]
    assert report["window"]["seconds"] == pytest.approx(8.0)

    out = tmp_path / "report"
    assert report["plots"] == ["timeline.png", "latency_histogram.png", "rss.png"]
    for name in report["plots"]:
        assert (out / name).read_bytes().startswith(b"\x89PNG")
    page = (out / "index.html").read_text()
    assert all(f'src="{name}"' in page for name in report["plots"])
    assert "report.json" in page


def test_order_is_checked_per_receiving_process_across_seconds(spark: Any, tmp_path: Path) -> None:
    log = RunLog(tmp_path)
    receipts = {0: 900, 2: 950, 1: 1100, 3: 1200, 5: 2400, 4: 2500, 6: 3000}
    for seq, at in receipts.items():
        log.message("p2", seq, seq, receipts=(at,))
    # Received by another process, before all of them: a stream of its own.
    log.message("p2", 7, 7, receipts=(100,), consumer="consumer-1")
    log.close()
    delivery = audit(spark, tmp_path)["delivery"]
    # seq 1 after seq 2 (an earlier second), seq 4 after seq 5 (the same second)
    assert delivery["order_violations"] == 2
    assert delivery["per_producer"]["p2"]["order_violations"] == 2
