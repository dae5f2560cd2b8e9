"""Security on the core head: logins through the SecurityStore, each permission enforced
per operation, refusals named, the session going on after a refusal."""

from __future__ import annotations

import pytest_twisted

from bridge.protocol import packets as p
from tests.heads.conftest import message


@pytest_twisted.ensureDeferred
async def test_wrong_credentials_are_refused_and_the_connection_closed(secure_node):
    for user, password in (("alice", "wrong"), ("nobody", "x"), (None, None)):
        peer = await secure_node.peer(connect_as=(user, password))
        await peer.lost
        assert peer.of(p.Connected) == []
        [failed] = peer.of(p.Failed)
        assert failed == p.Failed(0, p.ErrorCode.AUTHENTICATION, "authentication failed")


@pytest_twisted.ensureDeferred
async def test_send_needs_the_send_permission(secure_node):
    alice = await secure_node.peer(connect_as=("alice", "alice-secret"))
    bob = await secure_node.peer(connect_as=("bob", "bob-secret"))
    alice.send(p.Send(1, None, message("orders")))
    bob.send(p.Send(1, None, message("orders")))
    await alice.confirmed(1)
    await bob.confirmed(1)
    assert alice.of(p.SendFailed) == []
    [denied] = bob.of(p.SendFailed)
    assert denied.code is p.ErrorCode.PERMISSION_DENIED
    assert denied.message == "user 'bob' lacks permission 'send' on address 'orders'"
    assert secure_node.broker.queue("orders").depth == 1


@pytest_twisted.ensureDeferred
async def test_each_send_of_a_send_many_is_checked_whatever_the_one_before(secure_node):
    alice = await secure_node.peer(connect_as=("alice", "alice-secret"))
    bodies = (b"a", b"b", b"x", b"y", b"c")  # runs of one address, allowed and not
    batch = tuple(message("orders" if body in b"abc" else "jobs", body) for body in bodies)
    alice.send(p.SendMany(1, None, batch))
    await alice.confirmed(5)
    denied = alice.of(p.SendFailed)
    assert [(f.sequence, f.code) for f in denied] == [
        (3, p.ErrorCode.PERMISSION_DENIED),
        (4, p.ErrorCode.PERMISSION_DENIED),
    ]
    queued = [entry.message.body for entry in secure_node.broker.queue("orders").browse()]
    assert queued == [b"a", b"b", b"c"]


@pytest_twisted.ensureDeferred
async def test_consume_and_browse_need_their_permissions(secure_node):
    bob = await secure_node.peer(connect_as=("bob", "bob-secret"))
    carol = await secure_node.peer(connect_as=("carol", "carol-secret"))
    bob.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    bob.send(p.CreateConsumer(2, 2, "orders", None, True, -1))
    carol.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    carol.send(p.CreateConsumer(2, 2, "orders", None, True, -1))
    assert await bob.reply(1) == p.Ok(1)
    assert await carol.reply(2) == p.Ok(2)
    for peer, user, permission in ((bob, "bob", "browse"), (carol, "carol", "consume")):
        request_id = 2 if permission == "browse" else 1
        denied = await peer.reply(request_id)
        assert isinstance(denied, p.Failed)
        assert denied.code is p.ErrorCode.PERMISSION_DENIED
        assert f"user {user!r} lacks permission {permission!r}" in denied.message


@pytest_twisted.ensureDeferred
async def test_queue_management_needs_create_and_delete_permissions(secure_node):
    alice = await secure_node.peer(connect_as=("alice", "alice-secret"))
    root = await secure_node.peer(connect_as=("root", "root-secret"))
    alice.send(
        p.CreateQueue(1, "orders.audit", "orders.audit", p.Routing.ANYCAST, True, None),
        p.CreateQueue(2, "tmp", "orders", p.Routing.ANYCAST, False, None),
        p.DeleteQueue(3, "orders"),
        p.Send(1, None, message("brand.new")),
    )
    for request_id, permission in ((1, "create-address"), (2, "create-non-durable-queue")):
        denied = await alice.reply(request_id)
        assert isinstance(denied, p.Failed) and denied.code is p.ErrorCode.PERMISSION_DENIED
        assert f"lacks permission {permission!r}" in denied.message
    denied = await alice.reply(3)
    assert isinstance(denied, p.Failed) and "'delete-durable-queue'" in denied.message
    send_denied = await alice.next(p.SendFailed)
    assert "lacks permission 'create-address' on address 'brand.new'" in send_denied.message
    root.send(
        p.CreateQueue(1, "audit", "audit", p.Routing.ANYCAST, True, None),
        p.CreateQueue(2, "news-tmp", "news", p.Routing.MULTICAST, False, None),
        p.DeleteQueue(3, "news-tmp"),
    )
    assert [await root.reply(n) for n in (1, 2, 3)] == [p.Ok(1), p.Ok(2), p.Ok(3)]
    # The refusals cost alice nothing else: her session goes on.
    alice.send(p.Send(2, None, message("orders")))
    await alice.confirmed(2)
