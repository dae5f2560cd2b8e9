"""A connection's SENDs reach their queue in the order sent, persistent or not: a
non-persistent SEND, which needs no store write, waits behind the persistent SENDs before
it that are queued only once written (those with a duplicate id; the connection reads
nothing meanwhile), as the core head holds such a send and Artemis keeps a session's sends
in order. A persistent SEND without one is queued at once, and so is what follows it."""

from __future__ import annotations

import pytest
import pytest_twisted

from tests.heads.stomp.test_store_failures import DOOMED, failing_add


@pytest.mark.parametrize("ids", [False, True], ids=["queued-early", "with-duplicate-ids"])
@pytest_twisted.ensureDeferred
async def test_persistent_and_non_persistent_sends_reach_the_queue_in_the_order_sent(
    stomp_node, ids
):
    client = await stomp_node.raw()
    await client.connect()
    persistent = [True, False, False, True, False, True, True, False]
    for n, flag in enumerate(persistent, 1):
        headers = {"destination": "/queue/mixed", "receipt": str(n)}
        if flag:
            headers["persistent"] = "true"
            if ids or n == 4:  # (one send queued once written among the early ones)
                headers["_TXB_DUP_ID"] = f"id-{n}"
        client.send("SEND", headers, b"%d" % n)
    await client.receipt(str(len(persistent)))
    bodies = [entry.message.body for entry in stomp_node.broker.queue("mixed").browse()]
    assert bodies == [b"%d" % n for n in range(1, len(persistent) + 1)]
    receipts = [frame.header("receipt-id") for frame in client.of("RECEIPT")]
    assert receipts == [str(n) for n in range(1, len(persistent) + 1)]


@pytest_twisted.ensureDeferred
async def test_a_held_send_is_not_queued_when_the_write_before_it_fails(stomp_node, monkeypatch):
    """The persistent SEND before it is not stored: the connection ends with an ERROR, and
    the non-persistent SEND it held, whose receipt the client never gets, is not queued
    behind the client's back."""
    store = stomp_node.broker.store
    monkeypatch.setattr(store, "add_then", failing_add(store, at_once=False))
    client = await stomp_node.raw()
    await client.connect()
    client.send("SEND", {"destination": "/queue/mixed", "persistent": "true", **DOOMED}, b"doomed")
    client.send("SEND", {"destination": "/queue/mixed", "receipt": "after"}, b"held")
    error = await client.error()
    assert error.header("message") == "not stored"
    assert client.of("RECEIPT") == []
    assert list(stomp_node.broker.queue("mixed").browse()) == []
