"""Durable 1 KiB messages A -> bridge -> B, consumed on B, each node its own process
(issue 6): every message arrives exactly once, in order per producer, and the bridge's
``/status`` counts them.

The issue's size: 100,000 messages from two producers. On a quiet 2-core machine the
bridge moves them in about 15 s; the timeouts leave room for a loaded one. The figures are
printed (``-s``)."""

from __future__ import annotations

import time

import pytest
import pytest_twisted

from tests.system.bridges import (
    KIB,
    Collector,
    Producers,
    bridge_table,
    check_delivered,
    wait_bridge,
    wait_queue_empty,
)
from tests.system.nodes import node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(420)]

COUNT = 100_000
PRODUCERS = 2


@pytest_twisted.ensureDeferred
async def test_durable_1kib_messages_arrive_once_in_order(nodes):
    b = await nodes(node_document("b", address=[{"name": "orders"}]), name="b").wait_started()
    a_document = node_document(
        "a",
        address=[{"name": "orders"}],
        bridge=[bridge_table("a-to-b", "orders", b.core_url, **{"forwarding-address": "orders"})],
    )
    a = await nodes(a_document, name="a").wait_started()

    collector = Collector(lambda: b.core_url, "orders").start()
    producers = Producers(
        lambda: a.core_url, "orders", producers=PRODUCERS, count=COUNT // PRODUCERS, size=KIB
    )
    started = time.monotonic()
    producers.start()
    await producers.done(timeout=300)
    sent_in = time.monotonic() - started
    assert producers.total_confirmed == COUNT and not producers.refused
    await collector.until(lambda: collector.distinct() >= COUNT, "all received on B", 300)
    elapsed = time.monotonic() - started
    await wait_queue_empty(a, "orders")
    await wait_queue_empty(b, "orders")
    entry = await wait_bridge(
        a, "a-to-b", lambda e: e["messages_forwarded"] >= COUNT, "counts every message"
    )
    await collector.stop()

    print(
        f"\n{COUNT} durable 1 KiB messages A -> B: sent in {sent_in:.1f} s, "
        f"received in {elapsed:.1f} s ({COUNT / elapsed:.0f} msgs/s end to end)"
    )
    check_delivered(producers, collector)
    assert collector.received == COUNT, "a message was delivered twice on B"
    for name in producers.names:
        assert collector.order[name] == list(range(COUNT // PRODUCERS)), f"{name} out of order"
    assert entry["state"] == "STARTED" and entry["last_error"] is None, entry
    assert entry["messages_forwarded"] == COUNT, entry
    assert entry["pending_confirmations"] == 0, entry
