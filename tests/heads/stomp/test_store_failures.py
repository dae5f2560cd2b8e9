"""A persistent SEND the store cannot write: the connection gets an ERROR saying so and no
receipt for it, then closes (a receipt still pending before it may not come either: the
client resends what it has no receipt for); other connections go on.

A SEND with a duplicate id is queued once written (``add_then``): a failed write is "not
stored". One without is queued at once, its write under way (``add_early``): a failed
write leaves it queued, and its outcome is unknown to the client.

The store's failure is injected (it tells of a failed commit, at once or on a later
turn), since a real disk cannot be made to fail here on demand."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.python.failure import Failure

from bridge.store import CommitFailed, Unsettled

DOOMED = {"_TXB_DUP_ID": "doomed-1"}
"""A duplicate id: the SEND is queued once written, so ``failing_add`` fails it."""


def failing_add(store: Any, *, at_once: bool, error: Exception | None = None) -> Any:
    """``add_then`` of ``store`` failing every add whose body is b'doomed' (with
    ``error``, by default a failed commit)."""
    real = store.add_then

    def add_then(message: Any, queues: Any, then: Any, **options: Any) -> None:
        if message.body != b"doomed":
            real(message, queues, then, **options)
            return
        failure = Failure(error or CommitFailed("disk full (injected)"))
        if at_once:
            then(failure)
        else:
            reactor.callLater(0, then, failure)

    return add_then


def failing_early_add(store: Any) -> Any:
    """``add_early`` of ``store`` whose write of a body b'doomed' fails on a later turn."""
    real = store.add_early

    def add_early(message: Any, queues: Any, then: Any, **options: Any) -> None:
        if message.body != b"doomed":
            real(message, queues, then, **options)
            return
        reactor.callLater(0, then, Failure(CommitFailed("disk full (injected)")))

    return add_early


@pytest.mark.parametrize("at_once", [True, False], ids=["refused-at-once", "commit-failed"])
@pytest_twisted.ensureDeferred
async def test_a_persistent_send_that_is_not_stored_ends_its_connection_only(
    stomp_node, monkeypatch, at_once
):
    store = stomp_node.broker.store
    monkeypatch.setattr(store, "add_then", failing_add(store, at_once=at_once))
    client = await stomp_node.raw()
    await client.connect()
    persistent = {"destination": "/queue/kept", "persistent": "true"}
    client.send("SEND", {**persistent, "receipt": "first"}, b"fine")
    client.send("SEND", {**persistent, **DOOMED, "receipt": "second"}, b"doomed")
    error = await client.error()
    assert error.header("message") == "not stored"
    assert b"disk full (injected)" in error.body
    assert [f.header("receipt-id") for f in client.of("RECEIPT")] in ([], ["first"])

    other = await stomp_node.raw()
    await other.connect()
    other.send("SEND", {**persistent, "receipt": "other"}, b"also fine")
    await other.receipt("other")
    kept = [entry.message.body for entry in stomp_node.broker.queue("kept").browse()]
    assert kept == [b"fine", b"also fine"]


@pytest_twisted.ensureDeferred
async def test_a_send_the_node_stopped_serving_before_it_was_settled_is_of_unknown_outcome(
    stomp_node, monkeypatch
):
    """Its backup may hold it or not: the ERROR says the outcome is unknown, not that the
    frame was not stored, and no receipt comes for it."""
    store = stomp_node.broker.store
    stopped = Unsettled("the node stopped serving before its backup had the batch")
    monkeypatch.setattr(store, "add_then", failing_add(store, at_once=False, error=stopped))
    client = await stomp_node.raw()
    await client.connect()
    client.send(
        "SEND",
        {"destination": "/queue/kept", "persistent": "true", "receipt": "r", **DOOMED},
        b"doomed",
    )
    error = await client.error()
    assert error.header("message") == "outcome unknown"
    assert b"may have been stored or not" in error.body
    assert client.of("RECEIPT") == []


@pytest_twisted.ensureDeferred
async def test_a_send_queued_before_its_write_failed_is_of_unknown_outcome_and_delivered(
    stomp_node, monkeypatch
):
    """Without a duplicate id the message was queued at once: its write failing, it stays
    queued (it may even have been delivered), so the client hears that the outcome is
    unknown, not that it was not stored. Its acknowledgement then writes nothing."""
    store = stomp_node.broker.store
    monkeypatch.setattr(store, "add_early", failing_early_add(store))
    client = await stomp_node.raw()
    await client.connect()
    persistent = {"destination": "/queue/kept", "persistent": "true"}
    client.send("SEND", {**persistent, "receipt": "first"}, b"fine")  # reserves ids
    await client.receipt("first")
    client.send("SEND", {**persistent, "receipt": "r"}, b"doomed")
    error = await client.error()
    assert error.header("message") == "outcome unknown"
    assert b"disk full (injected)" in error.body
    assert [f.header("receipt-id") for f in client.of("RECEIPT")] == ["first"]

    consumer = await stomp_node.client()
    await consumer.call("subscribe", "/queue/kept", id="s", ack="client-individual")
    fine, doomed = await consumer.messages(2)
    assert (fine.body, doomed.body) == (b"fine", b"doomed")
    for delivered in (fine, doomed):
        receipt = f"ack-{id(delivered)}"
        await consumer.ack(delivered, receipt=receipt)
        await consumer.receipt(receipt)
    assert list(stomp_node.broker.queue("kept").browse()) == []
