"""CONNECT first, and what the core head does with a peer that does not keep the rules:
an ERROR frame naming the fault, that connection closed, every other one served."""

from __future__ import annotations

import pytest_twisted

from bridge.protocol import packets as p
from tests.heads.conftest import Peer, message
from transport.errors import PeerError
from transport.frames import encode


async def error_text(peer: Peer) -> str:
    """The node's ERROR frame's text, as the peer's transport reports it."""
    reason = await peer.lost
    assert isinstance(reason, PeerError), reason
    return str(reason)


@pytest_twisted.ensureDeferred
async def test_connect_is_answered_with_the_node(node):
    peer = await node.peer()
    [connected] = peer.of(p.Connected)
    assert connected == p.Connected("a", "id-a", p.PROTOCOL_VERSION, p.UNLIMITED)
    assert node.head.connections == 1


@pytest_twisted.ensureDeferred
async def test_a_packet_before_connect_closes_that_connection_only(node):
    good = await node.peer()
    bad = await node.peer(connect_as=None)
    bad.send(p.Send(1, None, message("orders")))
    assert "SEND before CONNECT" in await error_text(bad)
    good.send(p.Send(1, None, message("orders")))
    await good.confirmed(1)


@pytest_twisted.ensureDeferred
async def test_a_second_connect_is_a_protocol_error(node):
    peer = await node.peer()
    peer.send(p.Connect(p.PROTOCOL_VERSION, "again", None, None, 1024))
    assert "CONNECT is not sent by a client" in await error_text(peer)


@pytest_twisted.ensureDeferred
async def test_a_node_packet_from_a_client_is_a_protocol_error(node):
    peer = await node.peer()
    peer.send(p.SendConfirmed(3))
    assert "SEND_CONFIRMED is not sent by a client" in await error_text(peer)


@pytest_twisted.ensureDeferred
async def test_an_unknown_protocol_version_is_refused(node):
    peer = await node.peer(connect_as=None)
    peer.send(p.Connect(99, "future", None, None, 1024))
    await peer.lost
    [failed] = peer.of(p.Failed)
    assert failed.request_id == 0
    assert failed.code is p.ErrorCode.UNSUPPORTED_VERSION
    assert "version 99" in failed.message


@pytest_twisted.ensureDeferred
async def test_a_malformed_packet_closes_that_connection_and_keeps_the_store(node):
    good = await node.peer()
    good.send(p.Send(1, None, message("orders", b"kept")))
    await good.confirmed(1)
    bad = await node.peer()
    # An ACK whose cumulative flag byte is 2.
    payload = bytes(4) + bytes(8) + b"\x02" + b"\x00" + b"\x00"
    assert bad.connection is not None
    bad.connection.send(p.PacketType.ACK, payload)
    assert "ACK.cumulative" in await error_text(bad)
    good.send(p.Send(2, None, message("orders", b"also kept")))
    await good.confirmed(2)
    assert node.broker.queue("orders").depth == 2


@pytest_twisted.ensureDeferred
async def test_an_oversized_frame_closes_that_connection(node):
    bad = await node.peer()
    assert bad.connection is not None
    wire = bad.connection.transport  # type: ignore[attr-defined]
    header, _ = encode(p.PacketType.SEND, b"")
    wire.write(header[:4] + (64 << 20).to_bytes(4, "big"))
    assert "frame of 67108864 bytes exceeds the maximum" in await error_text(bad)
    good = await node.peer()
    good.send(p.Send(1, None, message("orders")))
    await good.confirmed(1)
