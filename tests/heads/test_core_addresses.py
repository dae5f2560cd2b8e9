"""What the core head answers about addresses (QUERY_ADDRESS), and core bridges' duplicate
ids on the wire: a repeat is confirmed and dropped, before and after a restart."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest_twisted

from bridge.config.node import Routing
from bridge.message import BRIDGE_DUPLICATE_ID, ROUTING_TYPE
from bridge.protocol import packets as p
from bridge.store.large import FreeBodies
from tests.heads.conftest import Node, message
from tests.heads.test_core_handshake import error_text

DEFAULTS = (-1, p.AddressFullPolicy.PAGE, 20000)
"""max-size-bytes, address-full-policy and id-cache-size when nothing sets them."""


def info(
    request_id: int,
    exists: bool,
    auto_create: bool,
    routing: p.Routing | None,
    settings: tuple[int, p.AddressFullPolicy, int] = DEFAULTS,
) -> p.AddressInfo:
    return p.AddressInfo(request_id, exists, auto_create, routing, *settings)


@pytest_twisted.ensureDeferred
async def test_existing_addresses_are_described_as_they_are(node):
    peer = await node.peer()
    peer.send(p.QueryAddress(1, "orders"), p.QueryAddress(2, "news"))
    assert await peer.reply(1) == info(1, True, True, p.Routing.ANYCAST)
    assert await peer.reply(2) == info(2, True, True, p.Routing.MULTICAST)


@pytest_twisted.ensureDeferred
async def test_a_missing_address_gets_the_settings_it_would_be_created_with(tmp_path: Path):
    settings = [
        {"match": "private.#", "auto-create-addresses": False},
        {
            "match": "events.#",
            "default-routing-type": "multicast",
            "max-size-bytes": "1MiB",
            "address-full-policy": "BLOCK",
            "id-cache-size": 500,
        },
    ]
    node = await Node(tmp_path, extra={"address-setting": settings}).start()
    try:
        peer = await node.peer()
        peer.send(
            p.QueryAddress(1, "events.eu"),
            p.QueryAddress(2, "brand.new"),
            p.QueryAddress(3, "private.x"),
            p.QueryAddress(4, "$bridge.orders"),
        )
        block = (1 << 20, p.AddressFullPolicy.BLOCK, 500)
        assert await peer.reply(1) == info(1, False, True, p.Routing.MULTICAST, block)
        assert await peer.reply(2) == info(2, False, True, p.Routing.ANYCAST)
        assert await peer.reply(3) == info(3, False, False, None)
        assert await peer.reply(4) == info(4, False, False, None)
        # Asking creates nothing.
        assert not any(node.broker.has_address(n) for n in ("events.eu", "brand.new"))
        peer.send(p.Send(1, None, message("events.eu")))
        await peer.confirmed(1)
        peer.send(p.QueryAddress(5, "events.eu"))
        assert await peer.reply(5) == info(5, True, True, p.Routing.MULTICAST, block)
    finally:
        await node.stop()


@pytest_twisted.ensureDeferred
async def test_a_query_needs_the_send_permission(secure_node):
    alice = await secure_node.peer(connect_as=("alice", "alice-secret"))
    bob = await secure_node.peer(connect_as=("bob", "bob-secret"))
    alice.send(p.QueryAddress(1, "orders"))
    bob.send(p.QueryAddress(1, "orders"), p.QueryAddress(2, "orders.missing"))
    assert await alice.reply(1) == info(1, True, True, p.Routing.ANYCAST)
    for request_id, address in ((1, "orders"), (2, "orders.missing")):
        denied = await bob.reply(request_id)
        assert denied == p.Failed(
            request_id,
            p.ErrorCode.PERMISSION_DENIED,
            f"user 'bob' lacks permission 'send' on address {address!r}",
        )
    # The refusal costs bob nothing else: his session goes on.
    bob.send(p.CreateConsumer(3, 1, "orders", None, False, -1))
    assert await bob.reply(3) == p.Ok(3)


@pytest_twisted.ensureDeferred
async def test_a_malformed_query_closes_that_connection_only(node):
    good = await node.peer()
    bad = await node.peer()
    assert bad.connection is not None
    bad.connection.send(p.PacketType.QUERY_ADDRESS, bytes(8) + b"\x00\x09orders")
    assert "QUERY_ADDRESS.address at offset 8" in await error_text(bad)
    good.send(p.QueryAddress(1, "orders"))
    assert await good.reply(1) == info(1, True, True, p.Routing.ANYCAST)


@pytest_twisted.ensureDeferred
async def test_a_client_cannot_answer_a_query(node):
    peer = await node.peer()
    peer.send(info(1, True, True, None))
    assert "ADDRESS_INFO is not sent by a client" in await error_text(peer)


def bridged(body: bytes, bridge_id: bytes) -> object:
    return message("orders", body, **{BRIDGE_DUPLICATE_ID: bridge_id})


@pytest_twisted.ensureDeferred
async def test_a_bridge_repeat_is_confirmed_and_dropped_even_after_a_restart(node, monkeypatch):
    peer = await node.peer()
    peer.send(
        p.Send(1, None, bridged(b"once", b"node-a:1")),
        p.Send(2, None, bridged(b"twice", b"node-a:1")),
        p.Send(3, None, bridged(b"other", b"node-a:2")),
    )
    await peer.confirmed(3)
    await node.restart()
    # The writer thread deletes (or keeps) the repeat's body file late, as on a busy
    # machine: only once the test has checked the queue. The test waits for it to look.
    checked = threading.Event()
    discard = FreeBodies.discard

    def late_discard(free: FreeBodies, path: str, reusable: bool) -> None:
        checked.wait(timeout=10)
        discard(free, path, reusable)

    monkeypatch.setattr(FreeBodies, "discard", late_discard)
    peer = await node.peer()
    body = b"L" * 300_000
    peer.send(
        p.Send(1, None, bridged(b"thrice", b"node-a:1")),
        p.SendLargeBegin(2, None, bridged(b"", b"node-a:2"), len(body)),
        p.SendLargeChunk(2, body, True),
    )
    await peer.confirmed(2)
    assert peer.of(p.SendFailed) == []
    assert [e.message.body for e in node.broker.queue("orders").browse()] == [b"once", b"other"]
    checked.set()
    assert await node.store.discarded() == 1  # the repeat's body file, on the writer thread
    large_dir = node.path / "data" / "large-messages"
    assert list(large_dir.iterdir()) == []


@pytest_twisted.ensureDeferred
async def test_an_address_takes_a_queue_of_either_routing_type_and_a_send_states_which(node):
    """A multicast queue on the anycast address ``orders`` gives it both routing types;
    a send goes to the anycast queue unless its routing type header says multicast;
    a header naming neither is refused, and the connection goes on."""
    peer = await node.peer()
    peer.send(p.CreateQueue(1, "orders.audit", "orders", p.Routing.MULTICAST, True, None))
    assert await peer.reply(1) == p.Ok(1)
    peer.send(p.QueryAddress(2, "orders"))
    assert await peer.reply(2) == info(2, True, True, p.Routing.BOTH)
    peer.send(
        p.Send(1, None, message("orders", b"work")),
        p.Send(2, None, message("orders", b"event", **{ROUTING_TYPE: "multicast"})),
        p.Send(3, None, message("orders", b"?", **{ROUTING_TYPE: "everyone"})),
        p.Send(4, None, message("orders", b"more work", **{ROUTING_TYPE: "anycast"})),
    )
    await peer.confirmed(4)
    [failed] = peer.of(p.SendFailed)
    assert (failed.sequence, failed.code) == (3, p.ErrorCode.INVALID)
    assert "_TXB_ROUTING_TYPE is 'everyone'" in failed.message
    assert [node.broker.queue(q).depth for q in ("orders", "orders.audit")] == [2, 1]


@pytest_twisted.ensureDeferred
async def test_a_protocol_2_client_is_served_and_told_the_routing_its_sends_get(node):
    node.broker.create_address("orders", Routing.MULTICAST)
    old = await node.peer(connect_as=None)
    old.send(p.Connect(2, "old", None, None, 1 << 20))
    connected = await old.next(p.Connected)
    assert connected.protocol_version == 2
    old.send(p.QueryAddress(1, "orders"))
    assert await old.reply(1) == info(1, True, True, p.Routing.ANYCAST)
    oldest = await node.peer(connect_as=None)
    oldest.send(p.Connect(1, "oldest", None, None, 1 << 20))
    await oldest.lost
    [refused] = oldest.of(p.Failed)
    assert "version 1 is not supported; this node speaks 2, 3, 4 and 5" in refused.message
