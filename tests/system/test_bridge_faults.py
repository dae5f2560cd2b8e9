"""Faults during one bridge run, repeatedly, with duplicate detection on (issue 6):
kill -9 of the source node A (restarted), kill -9 of the target node B (restarted), and
the bridge's connection dropped mid-stream (a TCP proxy between A and B, cut). Producers
send durable messages to A with the project's client and await confirmations; a consumer
on B acknowledges. Nothing confirmed by A is lost on the way to B, and no message arrives
on B as two messages.

SIZE: 2 producers x 6,000 durable 1 KiB messages and two rounds of the three faults, so
that the run stays within CI time; each fault comes once more messages were confirmed."""

from __future__ import annotations

import signal
import time

import pytest
import pytest_twisted

from tests.system.bridges import (
    Collector,
    Producers,
    Proxy,
    bridge_table,
    check_delivered,
    core_acceptor,
    free_port,
    pause,
    wait_bridge,
    wait_queue_empty,
)
from tests.system.nodes import NodeProcess, node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

PRODUCERS = 2
COUNT = 6000
"""Per producer."""
FAULTS = ("cut", "kill B", "kill A") * 2
STEP = PRODUCERS * COUNT // (len(FAULTS) + 2)
"""Confirmed sends between two faults."""


@pytest_twisted.ensureDeferred
async def test_nothing_lost_nothing_duplicated_through_kills_and_cuts(nodes):
    a_port, b_port = free_port(), free_port()
    b_document = node_document("b", address=[{"name": "orders"}], acceptor=core_acceptor(b_port))
    b = await nodes(b_document, name="b").wait_started()
    proxy = Proxy(b_port).listen()
    a_document = node_document(
        "a",
        address=[{"name": "orders"}],
        acceptor=core_acceptor(a_port),
        bridge=[bridge_table("a-to-b", "orders", proxy.url, **{"use-duplicate-detection": True})],
    )
    a = await nodes(a_document, name="a").wait_started()
    current: dict[str, NodeProcess] = {"a": a, "b": b}

    collector = Collector(lambda: current["b"].core_url, "orders").start()
    producers = Producers(
        lambda: current["a"].core_url,
        "orders",
        producers=PRODUCERS,
        count=COUNT,
        ahead=200,
        paced_by=collector.distinct,
        lead=1000,
    )
    started = time.monotonic()
    producers.start()
    done = []
    try:
        for number, fault in enumerate(FAULTS, start=1):
            await _until(lambda n=number: producers.total_confirmed >= n * STEP, 60, fault)
            await collector.until(
                lambda n=number: collector.distinct() >= (n - 0.5) * STEP,
                f"B receives before fault {number} ({fault})",
                60,
            )
            assert not producers.finished, f"the producers finished before fault {number}"
            if fault == "cut":
                assert proxy.cut() >= 1, "no bridge connection went through the proxy"
            else:
                which = "a" if fault == "kill A" else "b"
                node = current[which]
                reconnects = producers.reconnects
                await node.stop(signal.SIGKILL)
                assert node.signal == signal.SIGKILL
                document = a_document if which == "a" else b_document
                current[which] = await nodes(document, name=which).wait_started()
                if which == "a":
                    # A producer still sending was connected to A: it sees the loss once it
                    # next sends, which may wait for B to catch up (its pacing).
                    await _until(
                        lambda before=reconnects: producers.reconnects > before,
                        60,
                        f"a producer's reconnection after fault {number} ({fault})",
                        "no producer reconnected",
                    )
            done.append(fault)
        await producers.done(timeout=120)
        assert producers.total_confirmed >= PRODUCERS * COUNT * 0.9, "few sends confirmed"
        confirmed = {(n, s) for n, seqs in producers.confirmed.items() for s in seqs}
        await collector.until(
            lambda: all(collector.has(*key) for key in confirmed), "every confirmed send on B", 90
        )
        await wait_queue_empty(current["a"], "orders")
        await wait_queue_empty(current["b"], "orders")
        entry = await wait_bridge(current["a"], "a-to-b", lambda e: True, "status")
    finally:
        await producers.stop()
        await collector.stop()
        await proxy.close()
    elapsed = time.monotonic() - started
    print(
        f"\nfaults {', '.join(done)}: {producers.total_confirmed} confirmed of "
        f"{PRODUCERS * COUNT}, {collector.distinct()} on B, {collector.received} deliveries, "
        f"{producers.reconnects} producer and {collector.reconnects} consumer reconnects, "
        f"{elapsed:.1f} s; bridge {entry}"
    )
    assert not producers.refused, producers.refused[:5]
    assert producers.reconnects >= FAULTS.count("kill A"), "A died under no producer"
    check_delivered(producers, collector)
    assert entry["state"] == "STARTED", entry


async def _until(
    condition, timeout: float, what: str, failure: str = "not enough confirmed sends"
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{failure} before {what}"
        await pause(0.02)
