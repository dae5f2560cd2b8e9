"""A scripted node double speaking the core protocol over real loopback TCP.

It is a double because the real node's core head (``bridge.heads.core``) is being written
at the same time by another engineer; tests/client/test_against_node.py runs the client
against the real thing once it exists. The double keeps queues in memory, routes a send to
the queue of its address, honours consumer credits, and can be told to hold confirmations,
refuse sends, refuse logins or drop connections.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

import attrs
from twisted.internet.interfaces import IListeningPort
from zope.interface import implementer

from bridge.message import Message
from bridge.protocol import (
    PACKET_TYPES,
    UNLIMITED,
    Ack,
    CloseConsumer,
    ClusterConnect,
    Connect,
    Connected,
    ConsumerCredits,
    CreateConsumer,
    CreateQueue,
    DeleteQueue,
    Deliver,
    DeliverLargeBegin,
    DeliverLargeChunk,
    ErrorCode,
    Failed,
    Nack,
    Ok,
    Packet,
    ProducerCredits,
    Redirect,
    Send,
    SendConfirmed,
    SendFailed,
    SendLargeBegin,
    SendLargeChunk,
    SendMany,
    Topology,
    TxBegin,
    TxCommit,
    TxRollback,
    decode_packet,
    encode_packet,
)
from transport.endpoints import listen
from transport.frames import Frame
from transport.interfaces import IFrameConnection, IFrameReceiver


@attrs.define
class Queued:
    message: Message
    count: int = 0


@attrs.define
class DoubleConsumer:
    consumer_id: int
    queue: str
    credit: int
    browse_only: bool
    next_delivery: int = 1
    browsed: int = 0
    unacked: dict[int, Queued] = attrs.Factory(dict)


class NodeDouble:
    """The node side: queues, and what each connection received."""

    def __init__(
        self,
        *,
        password: str | None = None,
        producer_window_size: int = UNLIMITED,
        large_delivery_size: int = 1 << 30,
        chunk_size: int = 4,
        name: str = "double",
    ) -> None:
        self.name = name
        self.topology: Topology | None = None
        """Sent after CONNECTED to a CLUSTER_CONNECT."""
        self.redirects: dict[str, tuple[str, ...]] = {}
        """Stores served elsewhere: a CLUSTER_CONNECT for one is redirected."""
        self.password = password
        self.producer_window_size = producer_window_size
        self.large_delivery_size = large_delivery_size
        self.chunk_size = chunk_size
        self.queues: dict[str, deque[Queued]] = {}
        self.connections: list[NodeSide] = []
        self.received: list[Packet] = []
        self.hold_confirms = False
        self.refuse_sends: dict[str, tuple[ErrorCode, str]] = {}
        self.ids = itertools.count(1)
        self.port: IListeningPort | None = None
        self.url = ""

    async def listen(self, reactor: Any) -> str:
        self.port = await listen(
            reactor, "tcp://127.0.0.1:0", self._side, accepted_types=PACKET_TYPES
        )
        return f"tcp://127.0.0.1:{self.port.getHost().port}"

    def _side(self) -> NodeSide:
        side = NodeSide(self)
        self.connections.append(side)
        return side

    async def stop(self) -> None:
        for side in self.connections:
            side.drop()
        for side in self.connections:
            if side.connection is not None and side.connection.lost_reason is None:
                await side.connection.when_lost()
        if self.port is not None:
            port, self.port = self.port, None
            await port.stopListening()

    def route(self, message: Message) -> None:
        stored = attrs.evolve(message, id=next(self.ids))
        self.queues.setdefault(message.address, deque()).append(Queued(stored))
        for side in self.connections:
            side.dispatch()

    def requeue(self, queued: Queued) -> None:
        self.queues.setdefault(queued.message.address, deque()).appendleft(queued)


@implementer(IFrameReceiver)
class NodeSide:
    """One connection's session on the node double."""

    def __init__(self, node: NodeDouble) -> None:
        self.node = node
        self.connection: IFrameConnection | None = None
        self.consumers: dict[int, DoubleConsumer] = {}
        self.transactions: dict[int, list[Any]] = {}
        self.held: list[int] = []
        self.large: tuple[SendLargeBegin, bytearray] | None = None
        self.confirmed = 0

    def connection_made(self, connection: IFrameConnection) -> None:
        self.connection = connection

    def connection_lost(self, reason: BaseException) -> None:
        for consumer in self.consumers.values():
            self._give_back(consumer)
        self.consumers.clear()
        self.connection = None

    def drop(self) -> None:
        if self.connection is not None:
            self.connection.close()

    def out(self, packet: Packet) -> None:
        if self.connection is not None:
            self.connection.send(*encode_packet(packet))

    def confirm_held(self) -> None:
        if self.held:
            self.out(SendConfirmed(max(self.held)))
            self.held.clear()

    def frame_received(self, frame: Frame) -> None:
        packet = decode_packet(frame.type, frame.payload)
        self.node.received.append(packet)
        handler = getattr(self, f"on_{type(packet).__name__}")
        handler(packet)
        self.dispatch()

    def on_ClusterConnect(self, packet: ClusterConnect) -> None:
        if packet.store in self.node.redirects:
            self.out(Redirect(packet.store, self.node.redirects[packet.store]))
            assert self.connection is not None
            self.connection.close()
            return
        self.on_Connect(packet)
        if self.node.topology is not None:
            self.out(self.node.topology)

    def on_Connect(self, packet: Connect | ClusterConnect) -> None:
        if self.node.password is not None and packet.password != self.node.password:
            self.out(Failed(0, ErrorCode.AUTHENTICATION, f"bad password for user {packet.user}"))
            assert self.connection is not None
            self.connection.close()
            return
        self.out(
            Connected(self.node.name, f"{self.node.name}-id", 1, self.node.producer_window_size)
        )

    def on_CreateQueue(self, packet: CreateQueue) -> None:
        if packet.name in self.node.queues:
            self.out(
                Failed(packet.request_id, ErrorCode.ALREADY_EXISTS, f"queue {packet.name!r} exists")
            )
        else:
            self.node.queues[packet.name] = deque()
            self.out(Ok(packet.request_id))

    def on_DeleteQueue(self, packet: DeleteQueue) -> None:
        if self.node.queues.pop(packet.name, None) is None:
            self.out(Failed(packet.request_id, ErrorCode.NOT_FOUND, f"no queue {packet.name!r}"))
        else:
            self.out(Ok(packet.request_id))

    def _accept(self, sequence: int, tx_id: int | None, message: Message) -> None:
        refusal = self.node.refuse_sends.get(message.address)
        if refusal is not None:
            self.out(SendFailed(sequence, *refusal))
        elif tx_id is not None and tx_id not in self.transactions:
            self.out(SendFailed(sequence, ErrorCode.NOT_FOUND, f"no transaction {tx_id}"))
        else:
            if tx_id is None:
                self.node.route(message)
            else:
                self.transactions[tx_id].append(message)
            if self.node.producer_window_size != UNLIMITED:
                self.out(ProducerCredits(message.address, message.size))
        if self.node.hold_confirms:
            self.held.append(sequence)
        else:
            self.out(SendConfirmed(sequence))

    def on_Send(self, packet: Send) -> None:
        self._accept(packet.sequence, packet.tx_id, packet.message)

    def on_SendMany(self, packet: SendMany) -> None:
        for offset, message in enumerate(packet.messages):
            self._accept(packet.first_sequence + offset, packet.tx_id, message)

    def on_SendLargeBegin(self, packet: SendLargeBegin) -> None:
        self.large = (packet, bytearray())

    def on_SendLargeChunk(self, packet: SendLargeChunk) -> None:
        assert self.large is not None
        begin, body = self.large
        body += packet.data
        if packet.last:
            self.large = None
            message = attrs.evolve(begin.message, body=bytes(body))
            self._accept(begin.sequence, begin.tx_id, message)

    def on_CreateConsumer(self, packet: CreateConsumer) -> None:
        if packet.queue not in self.node.queues:
            self.out(Failed(packet.request_id, ErrorCode.NOT_FOUND, f"no queue {packet.queue!r}"))
            return
        self.consumers[packet.consumer_id] = DoubleConsumer(
            packet.consumer_id, packet.queue, packet.window_size, packet.browse_only
        )
        self.out(Ok(packet.request_id))

    def on_ConsumerCredits(self, packet: ConsumerCredits) -> None:
        self.consumers[packet.consumer_id].credit += packet.credits

    def on_CloseConsumer(self, packet: CloseConsumer) -> None:
        consumer = self.consumers.pop(packet.consumer_id)
        self._give_back(consumer)
        self.out(Ok(packet.request_id))

    def _give_back(self, consumer: DoubleConsumer) -> None:
        for queued in reversed(consumer.unacked.values()):
            self.node.requeue(queued)
        consumer.unacked.clear()

    def on_Ack(self, packet: Ack) -> None:
        consumer = self.consumers[packet.consumer_id]
        ids = (
            [d for d in consumer.unacked if d <= packet.delivery_id]
            if packet.cumulative
            else [packet.delivery_id]
        )
        taken = [consumer.unacked.pop(d) for d in ids]
        if packet.tx_id is not None:
            self.transactions[packet.tx_id].append(taken)
        if packet.request_id is not None:
            self.out(Ok(packet.request_id))

    def on_Nack(self, packet: Nack) -> None:
        queued = self.consumers[packet.consumer_id].unacked.pop(packet.delivery_id)
        if packet.requeue:
            self.node.requeue(queued)

    def on_TxBegin(self, packet: TxBegin) -> None:
        self.transactions[packet.tx_id] = []
        self.out(Ok(packet.request_id))

    def on_TxCommit(self, packet: TxCommit) -> None:
        for item in self.transactions.pop(packet.tx_id):
            if isinstance(item, Message):
                self.node.route(item)
        self.out(Ok(packet.request_id))

    def on_TxRollback(self, packet: TxRollback) -> None:
        for item in self.transactions.pop(packet.tx_id):
            if not isinstance(item, Message):
                for queued in reversed(item):
                    self.node.requeue(queued)
        self.out(Ok(packet.request_id))

    def dispatch(self) -> None:
        """Deliver to every consumer with credit, while its queue has messages."""
        if self.connection is None or self.connection.lost_reason is not None:
            return
        for consumer in self.consumers.values():
            queue = self.node.queues.get(consumer.queue)
            while queue is not None and (consumer.credit > 0 or consumer.credit == UNLIMITED):
                if consumer.browse_only:
                    if consumer.browsed >= len(queue):
                        break
                    queued = queue[consumer.browsed]
                    consumer.browsed += 1
                else:
                    if not queue:
                        break
                    queued = queue.popleft()
                    consumer.unacked[consumer.next_delivery] = queued
                queued.count += 1
                self._deliver(consumer, queued)

    def _deliver(self, consumer: DoubleConsumer, queued: Queued) -> None:
        delivery_id = consumer.next_delivery
        consumer.next_delivery += 1
        message = queued.message
        if len(message.body) < self.node.large_delivery_size:
            self.out(Deliver(consumer.consumer_id, delivery_id, queued.count, message))
            cost = message.size
        else:
            header = attrs.evolve(message, body=b"")
            body = message.body
            self.out(
                DeliverLargeBegin(
                    consumer.consumer_id, delivery_id, queued.count, header, len(body)
                )
            )
            size = self.node.chunk_size
            for at in range(0, len(body), size):
                data = body[at : at + size]
                self.out(
                    DeliverLargeChunk(
                        consumer.consumer_id, delivery_id, data, at + size >= len(body)
                    )
                )
            cost = header.size + len(body)
        if consumer.credit != UNLIMITED:
            consumer.credit -= cost
