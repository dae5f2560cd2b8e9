"""Sends over the core head: confirmed in ranges once stored, refusals reported before the
range passes them, duplicates confirmed and dropped, large sends reassembled; a send the
node stopped serving before it was settled neither confirmed nor refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet.defer import Deferred
from zope.interface import implementer

from bridge.heads.core import DUPLICATE_ID_HEADER
from bridge.protocol import packets as p
from bridge.store.errors import Unsettled
from bridge.store.interfaces import IReplication
from tests.heads.conftest import eventually, message


@pytest_twisted.ensureDeferred
async def test_a_turn_of_sends_is_confirmed_by_one_range(node):
    peer = await node.peer()
    peer.send(*(p.Send(n, None, message("orders", b"%d" % n)) for n in range(1, 101)))
    await peer.confirmed(100)
    confirmations = peer.of(p.SendConfirmed)
    assert len(confirmations) < 100
    ups = [c.up_to_sequence for c in confirmations]
    assert ups == sorted(ups)
    bodies = [e.message.body for e in node.broker.queue("orders").browse()]
    assert bodies == [b"%d" % n for n in range(1, 101)]


@pytest_twisted.ensureDeferred
async def test_durable_and_non_durable_sends_reach_the_queue_in_the_order_sent(node):
    """A non-durable send routed at once would overtake the durable sends before it that
    wait for their store write; it waits behind them instead, as Artemis keeps a
    session's sends in order."""
    peer = await node.peer()
    durable = [True, False, False, True, False, True, True, False]
    peer.send(
        *(
            p.Send(n, None, message("orders", b"%d" % n, durable=flag))
            for n, flag in enumerate(durable, 1)
        )
    )
    await peer.confirmed(len(durable))
    bodies = [e.message.body for e in node.broker.queue("orders").browse()]
    assert bodies == [b"%d" % n for n in range(1, len(durable) + 1)]
    confirmations = [c.up_to_sequence for c in peer.of(p.SendConfirmed)]
    assert confirmations == sorted(confirmations) and not peer.of(p.SendFailed)


@pytest_twisted.ensureDeferred
async def test_confirmed_durable_sends_survive_a_restart_and_non_durable_ones_do_not(node):
    peer = await node.peer()
    peer.send(
        p.Send(1, None, message("orders", b"kept")),
        p.Send(2, None, message("orders", b"gone", durable=False)),
    )
    await peer.confirmed(2)
    await node.restart()
    assert [e.message.body for e in node.broker.queue("orders").browse()] == [b"kept"]


@pytest_twisted.ensureDeferred
async def test_a_refused_send_is_reported_before_the_range_covers_it(node):
    peer = await node.peer()
    peer.send(
        p.Send(1, None, message("orders")),
        p.Send(2, None, message("private.x")),
        p.Send(3, None, message("orders")),
    )
    await peer.confirmed(3)
    [failed] = peer.of(p.SendFailed)
    assert failed.sequence == 2
    assert failed.code is p.ErrorCode.NOT_FOUND
    assert "'private.x' does not exist" in failed.message
    assert peer.received.index(failed) < peer.received.index(peer.of(p.SendConfirmed)[-1])


@pytest_twisted.ensureDeferred
async def test_a_send_in_an_unknown_transaction_is_refused(node):
    peer = await node.peer()
    peer.send(p.Send(1, 77, message("orders")))
    failed = await peer.next(p.SendFailed)
    assert (failed.code, failed.message) == (p.ErrorCode.NOT_FOUND, "no open transaction 77")


@pytest_twisted.ensureDeferred
async def test_a_repeated_duplicate_id_is_confirmed_and_dropped_even_after_a_restart(node):
    peer = await node.peer()
    peer.send(
        p.Send(1, None, message("orders", b"once", **{DUPLICATE_ID_HEADER: "order-1"})),
        p.Send(2, None, message("orders", b"twice", **{DUPLICATE_ID_HEADER: "order-1"})),
    )
    await peer.confirmed(2)
    assert node.broker.queue("orders").depth == 1
    await node.restart()
    peer = await node.peer()
    peer.send(p.Send(1, None, message("orders", b"thrice", **{DUPLICATE_ID_HEADER: "order-1"})))
    await peer.confirmed(1)
    assert [e.message.body for e in node.broker.queue("orders").browse()] == [b"once"]
    assert peer.of(p.SendFailed) == []


@pytest_twisted.ensureDeferred
async def test_sequences_must_increase(node):
    peer = await node.peer()
    peer.send(p.Send(5, None, message("orders")), p.Send(5, None, message("orders")))
    reason = await peer.lost
    assert "send sequence 5 does not follow 5" in str(reason)


@pytest_twisted.ensureDeferred
async def test_a_large_send_arrives_whole_in_its_body_file(node):
    peer = await node.peer()
    body = bytes(range(256)) * 1000
    peer.send(p.SendLargeBegin(1, None, message("orders", b""), len(body)))
    peer.send(*(p.SendLargeChunk(1, body[i : i + 30000], False) for i in range(0, 240000, 30000)))
    peer.send(p.SendLargeChunk(1, body[240000:], True))
    await peer.confirmed(1)
    [entry] = node.broker.queue("orders").browse()
    assert entry.message.body == b""
    assert entry.message.large is not None
    assert entry.message.large.size == len(body)
    assert Path(entry.message.large.path).read_bytes() == body


@pytest_twisted.ensureDeferred
async def test_a_large_send_whose_chunks_do_not_add_up_is_refused(node):
    peer = await node.peer()
    peer.send(
        p.SendLargeBegin(1, None, message("orders", b""), 10),
        p.SendLargeChunk(1, b"12345", True),
        p.Send(2, None, message("orders")),
    )
    await peer.confirmed(2)
    [failed] = peer.of(p.SendFailed)
    assert failed.code is p.ErrorCode.INVALID
    assert "declared 10 bytes but its chunks held 5" in failed.message
    assert node.broker.queue("orders").depth == 1


@pytest_twisted.ensureDeferred
async def test_another_send_inside_a_large_send_is_a_protocol_error(node):
    peer = await node.peer()
    peer.send(
        p.SendLargeBegin(1, None, message("orders", b""), 10),
        p.Send(2, None, message("orders")),
    )
    reason = await peer.lost
    assert "send 2 while the large send 1 is unfinished" in str(reason)


@implementer(IReplication)
class _HeldCopy:
    """A backup's copy that answers for no batch until the test fails them."""

    def __init__(self) -> None:
        self.batches: list[Deferred[None]] = []

    def replicate(self, operations: Any) -> Deferred[None]:
        self.batches.append(Deferred())
        return self.batches[-1]

    def diverged(self, failure: Any) -> None:
        raise AssertionError(failure)

    def discarded(self, path: str) -> None:
        pass


@pytest_twisted.ensureDeferred
async def test_a_send_the_node_stopped_serving_before_it_was_settled_is_resent_not_refused(node):
    """The node stops serving while a replicated batch waits for its backup (which may
    hold it or not): no SEND_FAILED, nothing after it confirmed; the connection ends, so
    that the client sends it again where it goes next, its duplicate id telling."""
    peer = await node.peer()
    peer.send(p.Send(1, None, message("orders", b"1")))
    await peer.confirmed(1)
    copy = node.store.replication = _HeldCopy()
    peer.send(p.Send(2, None, message("orders", b"2")))
    await eventually(lambda: copy.batches)
    peer.send(p.Send(3, None, message("orders", b"3", durable=False)))  # held behind 2
    copy.batches[0].errback(Unsettled("the node stopped serving before its backup had it"))
    await peer.until(lambda: peer.lost.called)
    node.store.replication = None
    assert peer.of(p.SendFailed) == []
    assert max(c.up_to_sequence for c in peer.of(p.SendConfirmed)) == 1


@pytest_twisted.ensureDeferred
async def test_a_commit_the_node_stopped_serving_before_it_was_settled_gets_no_answer(node):
    """Neither OK nor FAILED would be true of a commit whose batch the backup may hold:
    the connection ends, and the client reports the commit's outcome as unknown."""
    peer = await node.peer()
    peer.send(p.TxBegin(1, 7), p.Send(1, 7, message("orders", b"in the transaction")))
    assert await peer.reply(1) == p.Ok(1)
    await peer.confirmed(1)
    copy = node.store.replication = _HeldCopy()
    peer.send(p.TxCommit(2, 7))
    await eventually(lambda: copy.batches)
    copy.batches[0].errback(Unsettled("the node stopped serving before its backup had it"))
    await peer.until(lambda: peer.lost.called)
    node.store.replication = None
    assert [r for r in peer.received if isinstance(r, (p.Ok, p.Failed)) and r.request_id == 2] == []


@pytest_twisted.ensureDeferred
async def test_a_durable_ack_the_node_stopped_serving_before_it_was_settled_gets_no_answer(node):
    peer = await node.peer()
    peer.send(p.Send(1, None, message("orders", b"held")))
    await peer.confirmed(1)
    peer.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    await peer.next(p.Deliver)
    copy = node.store.replication = _HeldCopy()
    peer.send(p.Ack(1, 1, False, None, 2))
    await eventually(lambda: copy.batches)
    copy.batches[0].errback(Unsettled("the node stopped serving before its backup had it"))
    await peer.until(lambda: peer.lost.called)
    node.store.replication = None
    assert [r for r in peer.received if isinstance(r, (p.Ok, p.Failed)) and r.request_id == 2] == []
