"""Local transactions over the core head: sends and acks take effect at commit, or never."""

from __future__ import annotations

import pytest_twisted

from bridge.protocol import packets as p
from tests.heads.conftest import message


@pytest_twisted.ensureDeferred
async def test_commit_makes_sends_and_acks_take_effect_together(node):
    peer = await node.peer()
    peer.send(p.Send(1, None, message("orders", b"old")))
    await peer.confirmed(1)
    peer.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    await peer.next(p.Deliver)
    peer.send(
        p.TxBegin(2, 10),
        p.Send(2, 10, message("orders", b"new")),
        p.Ack(1, 1, False, 10, None),
    )
    assert await peer.reply(2) == p.Ok(2)
    await peer.confirmed(2)
    assert node.broker.queue("orders").waiting == 0  # the send waits for the commit
    peer.send(p.TxCommit(3, 10))
    assert await peer.reply(3) == p.Ok(3)
    delivered = await peer.next(p.Deliver, 2)
    assert delivered.message.body == b"new"
    await node.restart()
    assert [e.message.body for e in node.broker.queue("orders").browse()] == [b"new"]


@pytest_twisted.ensureDeferred
async def test_rollback_drops_sends_and_redelivers_acknowledged_messages(node):
    peer = await node.peer()
    peer.send(p.Send(1, None, message("orders", b"kept")))
    await peer.confirmed(1)
    peer.send(
        p.CreateConsumer(1, 1, "orders", None, False, -1),
        p.TxBegin(2, 5),
    )
    await peer.next(p.Deliver)
    peer.send(
        p.Send(2, 5, message("orders", b"never")),
        p.Ack(1, 1, False, 5, 3),
        p.TxRollback(4, 5),
    )
    assert await peer.reply(3) == p.Ok(3)
    assert await peer.reply(4) == p.Ok(4)
    again = await peer.next(p.Deliver, 2)
    assert (again.message.body, again.delivery_count) == (b"kept", 2)
    assert node.broker.queue("orders").depth == 1


@pytest_twisted.ensureDeferred
async def test_an_open_transaction_rolls_back_when_its_connection_ends(node):
    peer = await node.peer()
    peer.send(p.TxBegin(1, 1), p.Send(1, 1, message("orders", b"uncommitted")))
    await peer.confirmed(1)
    await peer.close()
    await node.head.close_connections("test")
    await node.restart()
    assert node.broker.queue("orders").depth == 0


@pytest_twisted.ensureDeferred
async def test_transaction_refusals(node):
    peer = await node.peer()
    peer.send(
        p.TxBegin(1, 1),
        p.TxBegin(2, 1),
        p.TxCommit(3, 9),
        p.TxRollback(4, 9),
    )
    assert await peer.reply(1) == p.Ok(1)
    for request_id, code in ((2, p.ErrorCode.ALREADY_EXISTS), (3, p.ErrorCode.NOT_FOUND)):
        failed = await peer.reply(request_id)
        assert isinstance(failed, p.Failed) and failed.code is code
    missing = await peer.reply(4)
    assert isinstance(missing, p.Failed) and missing.message == "no open transaction 9"
    peer.send(p.CreateConsumer(5, 1, "orders", None, False, -1))
    await peer.reply(5)
    peer.send(p.Send(1, None, message("orders")))
    await peer.next(p.Deliver)
    peer.send(p.Ack(1, 1, False, 9, 6))
    failed = await peer.reply(6)
    assert isinstance(failed, p.Failed) and failed.code is p.ErrorCode.NOT_FOUND
    peer.send(p.Ack(1, 1, False, 9, None))
    reason = await peer.lost
    assert "ACK in transaction 9, which is not open" in str(reason)
