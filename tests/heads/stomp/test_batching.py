"""What the STOMP path does once per reactor turn rather than once per message: the
automatic acknowledgements of an ``ack:auto`` subscription's deliveries go to the store as
one operation, and the MESSAGE frames of a turn leave in one write."""

from __future__ import annotations

from typing import Any

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from bridge.heads.stomp import StompHead, StompSettings
from bridge.heads.stomp.frames import (
    NEED_DATA,
    SERVER_COMMANDS,
    Command,
    Frame,
    FrameParser,
    Limits,
    Version,
)
from bridge.heads.stomp.protocol import StompFactory
from tests.forward.conftest import eventually
from tests.heads.stomp.test_ack_machine import FrameSink, sink_session

SETTINGS = StompSettings(ttl=None, heart_beat=None)


class _Subscribed:
    """A STOMP session on ``stomp_node``'s broker over a frame sink, subscribed to
    ``/queue/orders`` with ``ack:auto``."""

    def __init__(self, stomp_node: Any) -> None:
        self.wire = FrameSink()
        self.session = sink_session(stomp_node, self.wire, reactor)

    def frame(self, command: str, **headers: str) -> None:
        self.session.event_received(Frame(Command(command), tuple(headers.items()), b"body"))

    def received(self, command: str) -> list[Frame]:
        return [f for f in self.wire.frames if f.command == command]

    async def subscribe(self) -> None:
        self.frame("CONNECT", **{"accept-version": "1.2"})
        self.frame("SUBSCRIBE", id="s", destination="/queue/orders", ack="auto", receipt="s")
        await eventually(lambda: self.received("RECEIPT"))

    def send_persistent(self, count: int) -> None:
        """``count`` persistent SENDs with receipts, in this turn (one read's worth)."""
        for n in range(count):
            self.frame("SEND", destination="/queue/orders", persistent="true", receipt=f"r{n}")


@pytest_twisted.ensureDeferred
async def test_the_automatic_acks_of_a_turn_go_to_the_store_as_one_operation(
    stomp_node, monkeypatch
):
    broker = stomp_node.broker
    store = broker.store
    acknowledged: list[tuple[str, list[int]]] = []
    acknowledge_many = store.acknowledge_many

    def counted(queue: str, message_ids: Any, tx: Any = None) -> Any:
        acknowledged.append((queue, list(message_ids)))
        return acknowledge_many(queue, message_ids, tx)

    monkeypatch.setattr(store, "acknowledge_many", counted)
    client = _Subscribed(stomp_node)
    await client.subscribe()
    client.send_persistent(10)  # stored in one batch, delivered in one turn
    await eventually(lambda: len(client.received("MESSAGE")) == 10 and acknowledged)
    queue = broker.queue("orders")
    assert queue.in_flight == 0
    ids = [int(f.header("message-id") or "") for f in client.received("MESSAGE")]
    assert acknowledged == [("orders", ids)]
    await store.between_batches(lambda: None)  # (their write is done)
    assert queue.depth == 0 and not client.received("ERROR")
    await client.session.connection_lost()


@pytest_twisted.ensureDeferred
async def test_persistent_sends_consumed_by_ack_auto_in_their_turn_are_never_written(
    stomp_node, monkeypatch
):
    """The automatic acknowledgements come at the end of the turn, after the turn's store
    batch was due: the batch waits a turn for them, and a message consumed so is never
    written (its receipt says it was consumed)."""
    broker = stomp_node.broker
    store = broker.store
    written: list[str] = []
    run = store._writer.run

    def recording(operations: Any) -> Any:
        written.extend(type(op).__name__ for op in operations)
        return run(operations)

    monkeypatch.setattr(store._writer, "run", recording)
    client = _Subscribed(stomp_node)
    await client.subscribe()
    client.send_persistent(10)  # consumed in the same turn
    await eventually(lambda: len(client.received("RECEIPT")) == 11)
    await store.between_batches(lambda: None)
    assert len(client.received("MESSAGE")) == 10 and not client.received("ERROR")
    assert "AddMessage" not in written and broker.queue("orders").depth == 0
    await client.session.connection_lost()


class _CountingTransport(StringTransport):
    """An in-memory transport that counts the writes it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        super().write(data)

    def writeSequence(self, data: Any) -> None:
        self.writes += 1
        super().writeSequence(data)


def _frames(data: bytes) -> list[Frame]:
    parser = FrameParser(Limits(), SERVER_COMMANDS)
    parser.version = Version.V1_2
    parser.feed(data)
    frames = []
    while (event := parser.next_event()) is not NEED_DATA:
        if isinstance(event, Frame):
            frames.append(event)
    return frames


def test_the_messages_of_a_turn_leave_in_one_write(stomp_node):
    clock = Clock()
    head = StompHead(stomp_node.broker, stomp_node.head.security, reactor=clock)
    protocol = StompFactory(head, SETTINGS).buildProtocol(None)
    transport = _CountingTransport()
    protocol.makeConnection(transport)
    protocol.dataReceived(
        b"CONNECT\naccept-version:1.2\n\n\x00"
        b"SUBSCRIBE\nid:s\ndestination:/queue/orders\nack:auto\nreceipt:s\n\n\x00"
    )
    clock.advance(0)
    assert [f.command for f in _frames(transport.value())] == ["CONNECTED", "RECEIPT"]
    transport.clear()
    writes = transport.writes
    sends = b"".join(b"SEND\ndestination:/queue/orders\n\n%d\x00" % n for n in range(20))
    protocol.dataReceived(sends)  # non-persistent: delivered in this turn
    clock.advance(0)
    messages = _frames(transport.value())
    assert [f.body for f in messages] == [b"%d" % n for n in range(20)]
    assert transport.writes == writes + 1
    transport.loseConnection()
    protocol.connectionLost(Failure(ConnectionDone()))
    clock.advance(0)
    assert head.connections == 0
