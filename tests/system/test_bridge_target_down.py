"""A bridge whose target is down when its node starts (issue 6): it shows STARTING with
the connection error while the target is down, keeps what its producers send, and once
the target comes up it connects and drains the queue to it, each message once."""

from __future__ import annotations

import pytest
import pytest_twisted

from tests.system.bridges import (
    Collector,
    Producers,
    bridge_table,
    check_delivered,
    core_acceptor,
    free_port,
    wait_bridge,
    wait_queue_empty,
)
from tests.system.flow import queue_of, status
from tests.system.nodes import node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

COUNT = 2000


@pytest_twisted.ensureDeferred
async def test_a_target_down_at_start_is_drained_to_once_it_comes_up(nodes):
    b_port = free_port()
    a_document = node_document(
        "a",
        address=[{"name": "orders"}],
        bridge=[bridge_table("a-to-b", "orders", f"tcp://127.0.0.1:{b_port}")],
    )
    a = await nodes(a_document, name="a").wait_started()

    down = await wait_bridge(
        a,
        "a-to-b",
        lambda e: e["state"] == "STARTING" and e["last_error"],
        "shows that its target is down",
    )
    assert str(b_port) in down["last_error"] or "refused" in down["last_error"].lower(), down
    assert down["connected_to"] is None, down

    producers = Producers(lambda: a.core_url, "orders", producers=2, count=COUNT // 2)
    producers.start()
    await producers.done(timeout=60)
    assert producers.total_confirmed == COUNT
    assert queue_of(await status(a), "orders")["depth"] == COUNT, "the bridge took while down"
    still = await wait_bridge(a, "a-to-b", lambda e: True, "status")
    assert still["state"] == "STARTING" and still["messages_forwarded"] == 0, still

    b_document = node_document("b", address=[{"name": "orders"}], acceptor=core_acceptor(b_port))
    b = await nodes(b_document, name="b").wait_started()
    collector = Collector(lambda: b.core_url, "orders").start()
    up = await wait_bridge(
        a, "a-to-b", lambda e: e["state"] == "STARTED", "connects once B is up", timeout=30
    )
    assert up["last_error"] is None and up["connected_to"], up
    await collector.until(lambda: collector.distinct() >= COUNT, "drained to B", 60)
    await wait_queue_empty(a, "orders")
    await wait_queue_empty(b, "orders")
    await collector.stop()
    check_delivered(producers, collector)
    assert collector.received == COUNT
    for name in producers.names:
        assert collector.order[name] == list(range(COUNT // 2)), f"{name} out of order"
    drained = await wait_bridge(a, "a-to-b", lambda e: True, "status")
    assert drained["messages_forwarded"] == COUNT and drained["pending_confirmations"] == 0
