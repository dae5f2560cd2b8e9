"""The client's ``trace`` option against a real node in this process: what it records for
sends, outcomes, deliveries, acks and flow-control pauses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from bridge import events
from bridge.client.errors import ClientClosed
from tests.client.test_against_node import RealNode


@pytest.fixture
def real(tmp_path: Path) -> Iterator[RealNode]:
    node = pytest_twisted.blockon(Deferred.fromCoroutine(RealNode(tmp_path / "node").start()))
    yield node
    pytest_twisted.blockon(Deferred.fromCoroutine(node.stop()))


def _read(run_dir: Path, process: str) -> list[dict[str, Any]]:
    """Every event of ``process`` (JSON lines: no pyarrow needed), absent fields as None."""
    folder = events.partition_dir(run_dir, "r1", process)
    names = [name for name, _ in events.FIELDS]
    return [
        {name: row.get(name) for name in names}
        for part in sorted(folder.iterdir())
        for row in map(json.loads, part.read_text().splitlines())
    ]


@pytest_twisted.ensureDeferred
async def test_a_traced_client_records_each_send_its_outcome_its_delivery_and_ack(
    real: RealNode, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    producing = events.EventWriter(run_dir, "r1", "producer-0", format="jsonl")
    consuming = events.EventWriter(run_dir, "r1", "consumer-0", format="jsonl")
    producer = await real.client(trace=producing)
    consumer_client = await real.client(trace=consuming)
    for n in range(2):
        await producer.send("orders", b"x" * (n + 1))
    await producer.send("orders", b"mine", {events.TRACE_PRODUCER: "app", events.TRACE_SEQ: 7})
    consumer = await consumer_client.consumer("orders")
    received = [await consumer.receive() for _ in range(3)]
    assert received[0].headers == {events.TRACE_PRODUCER: "producer-0", events.TRACE_SEQ: 0}
    await received[-1].ack_durably(cumulative=True)
    await consumer.close()
    await producer.close()
    with pytest.raises(ClientClosed):
        producer.send_nowait("orders", b"late")
    producing.close()
    consuming.close()

    sent = _read(run_dir, "producer-0")
    assert [(e["kind"], e["producer"], e["seq"]) for e in sent] == [
        ("send-invoked", "producer-0", 0),
        ("send-confirmed", "producer-0", 0),
        ("send-invoked", "producer-0", 1),
        ("send-confirmed", "producer-0", 1),
        ("send-invoked", "app", 7),
        ("send-confirmed", "app", 7),
        ("send-invoked", "producer-0", 2),
        ("send-failed", "producer-0", 2),
    ]
    assert [e["size"] for e in sent[:3:2]] == [1, 2]
    assert {e["node"] for e in sent[:6]} == {"a"}
    assert sent[-1]["detail"].startswith("not sent:")
    assert all(e["address"] == "orders" for e in sent)
    got = _read(run_dir, "consumer-0")
    assert [(e["kind"], e["producer"], e["seq"], e["detail"]) for e in got] == [
        ("received", "producer-0", 0, None),
        ("received", "producer-0", 1, None),
        ("received", "app", 7, None),
        ("acked", "app", 7, "cumulative"),
    ]
    assert got[0]["message"] == str(received[0].id)
    assert sorted(e["ts"] for e in got) == [e["ts"] for e in got]


@pytest_twisted.ensureDeferred
async def test_a_traced_client_records_the_spans_it_waits_to_be_writable(
    real: RealNode, tmp_path: Path
) -> None:
    writer = events.EventWriter(tmp_path / "run", "r1", "producer-0", format="jsonl")
    client = await real.client(trace=writer, confirmation_window_size=1)
    client.send_nowait("orders", b"fills the window")
    assert not client.is_writable
    await client.when_writable()
    writer.close()
    rows = _read(tmp_path / "run", "producer-0")
    flow = [(e["kind"], e["detail"]) for e in rows if e["kind"].startswith("flow")]
    assert flow == [("flow-paused", "confirmation-window"), ("flow-resumed", None)]
