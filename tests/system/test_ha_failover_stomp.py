"""kill -9 of the live node in the middle of a durable STOMP send run: nodes a (primary)
and b (backup) share one PostgreSQL schema, each with a STOMP port of its own, and the
stomp.py clients are given both (stomp.py tries the hosts of its list in turn; only the
live node accepts). A stomp.py producer sends persistent messages,
each with a receipt and a duplicate id, and after a lost connection connects again and
resends what had no receipt; a stomp.py consumer acknowledges every 50th message
(client: cumulative) and subscribes again after a lost connection.

Both clients write the audit pipeline's event log as the traced core client does (each
SEND stamped with the producer and its sequence number; a SEND's receipt is its
confirmation, by the node it came from), and the audit finds nothing receipted lost and
nothing unexpected. The test checks the rest itself: every message received twice
carried ``redelivered:true`` the second time."""

from __future__ import annotations

import signal
import threading
import time
from contextlib import suppress
from typing import Any

import pytest
import pytest_twisted
import stomp
from twisted.internet.threads import deferToThread

from bridge import events
from bridge.node.duplicates import DUPLICATE_ID_HEADER
from tests.forward.conftest import eventually
from tests.postgresql import schema_url
from tests.system.audit_run import audit, check_failover
from tests.system.bridges import free_port
from tests.system.ha import PING, REAP, SLACK, ha_node

COUNT = 600
KILL_AFTER = 225
"""Receipted sends before the kill (not a multiple of ACK_EVERY: some messages are then
delivered and not acknowledged); the rest go to b."""
DEADLINE = 120.0
"""Bound on the whole run of each client thread (a loaded box, the failover included)."""
ACK_EVERY = 50
"""The consumer acknowledges cumulatively every this many messages, so that some are
delivered and not acknowledged when the node dies (b gives them again, redelivered)."""
RETRY = 0.05
"""Between connection attempts while no node listens (the clients' retry interval)."""
TAKEOVER_SLACK = 5.0
"""Beyond reap + ping, for a loaded box; benchmarks/failover.py measures the figure."""


class Peer(stomp.ConnectionListener):  # type: ignore[misc]
    """One stomp.py connection at a time to one of ``ports``, made again when it drops."""

    def __init__(self, nodes: dict[int, str], trace: events.EventWriter) -> None:
        self.nodes = nodes
        """Node names by STOMP port."""
        self.ports = list(nodes)
        self.trace = trace
        """The event log, written under ``changed`` (by the client's thread and by the
        threads that receive)."""
        self.changed = threading.Condition()
        self.receipts: set[str] = set()
        self.received: list[tuple[int, bool]] = []
        self.connection: Any = None
        self.generation = 0
        self.unacked = 0
        self.stop = threading.Event()

    def on_receipt(self, frame: Any) -> None:
        """A SEND's receipt (``r`` and its sequence number): its confirmation, by the node
        of the connection it came on (the one the SEND went on)."""
        receipt = frame.headers["receipt-id"]
        with self.changed:
            self.receipts.add(receipt)
            self.trace.record(
                events.SEND_CONFIRMED,
                "stomp-producer",
                int(receipt[1:]),
                node=self.node(),
                address="orders",
            )
            self.changed.notify_all()

    def on_message(self, frame: Any) -> None:
        with self.changed:
            seq = int(frame.headers[events.TRACE_SEQ])
            self.received.append((seq, frame.headers.get("redelivered") == "true"))
            self.trace.record(
                events.RECEIVED,
                frame.headers[events.TRACE_PRODUCER],
                seq,
                message=frame.headers["message-id"],
                node=self.node(),
                address="orders",
                size=len(frame.body),
            )
            self.changed.notify_all()
            self.unacked += 1
            if self.unacked < ACK_EVERY:
                return
            self.unacked = 0
        self.connection.ack(frame.headers["ack"])  # cumulative: this one and those before

    def on_disconnected(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def connected(self) -> bool:
        return self.connection is not None and self.connection.is_connected()

    def node(self) -> str | None:
        """The name of the node connected to, if any."""
        if self.connection is None:
            return None
        where = self.connection.transport.current_host_and_port
        return None if where is None else self.nodes.get(where[1])

    def connect(self, deadline: float) -> None:
        """Connect, retrying every ``RETRY`` s until ``deadline`` (monotonic)."""
        while time.monotonic() < deadline:
            connection = stomp.Connection12(
                [("127.0.0.1", port) for port in self.ports],
                auto_decode=False,
                reconnect_attempts_max=1,
            )
            connection.set_listener("peer", self)
            try:
                connection.connect(wait=True)
            except (stomp.exception.StompException, OSError):
                # no node listens yet, or the one that did went away while stomp.py was
                # connecting (its receiving thread closed the socket under the CONNECT)
                time.sleep(RETRY)
                continue
            self.connection = connection
            self.generation += 1
            self.unacked = 0
            return
        raise AssertionError(f"no STOMP connection to ports {self.ports} in time")

    def wait_for_receipt(self, receipt: str, deadline: float) -> None:
        """Until ``receipt`` came, the connection dropped or ``deadline`` (monotonic)."""
        with self.changed:
            self.changed.wait_for(
                lambda: receipt in self.receipts or not self.connected(),
                max(0.0, deadline - time.monotonic()),
            )

    def close(self) -> None:
        if self.connected():
            self.connection.disconnect()


def produce(peer: Peer) -> None:
    """Send each message until its receipt came, connecting again after a drop."""
    deadline = time.monotonic() + DEADLINE
    for seq in range(COUNT):
        receipt = f"r{seq}"
        while receipt not in peer.receipts:
            if time.monotonic() > deadline:
                raise AssertionError(f"message {seq} got no receipt in time")
            if not peer.connected():
                peer.connect(deadline)
            headers = {
                "persistent": "true",
                events.TRACE_PRODUCER: "stomp-producer",
                events.TRACE_SEQ: str(seq),
                DUPLICATE_ID_HEADER: f"seq-{seq}",
                "receipt": receipt,
            }
            with peer.changed:
                peer.trace.record(
                    events.SEND_INVOKED,
                    "stomp-producer",
                    seq,
                    node=peer.node(),
                    address="orders",
                    size=8,
                )
            # the node may die under the send: once stomp.py saw the drop, send again
            with suppress(stomp.exception.NotConnectedException, OSError):
                peer.connection.send("/queue/orders", b"%08d" % seq, headers=headers)
            peer.wait_for_receipt(receipt, deadline)


def consume(peer: Peer) -> None:
    """Subscribe (cumulative acks), again after each drop, until told to stop."""
    deadline = time.monotonic() + DEADLINE
    while not peer.stop.is_set():
        if time.monotonic() > deadline:
            raise AssertionError("the consumer ran out of time")
        if not peer.connected():
            peer.connect(deadline)
            try:
                peer.connection.subscribe("/queue/orders", id="s", ack="client")
            except (stomp.exception.NotConnectedException, OSError):
                continue  # the node died under the subscribe: connect again
        with peer.changed:
            peer.changed.wait_for(lambda: peer.stop.is_set() or not peer.connected(), 1.0)


def stomp_ha_node(name: str, url: str, policy: str, port: int) -> dict[str, Any]:
    document = ha_node(name, url, policy)
    document["acceptor"] = [
        {"name": "stomp", "url": f"tcp://127.0.0.1:{port}", "protocols": ["stomp"]}
    ]
    return document


@pytest.mark.system
@pytest.mark.timeout(450)
@pytest_twisted.ensureDeferred
async def test_kill_9_of_the_live_node_loses_no_receipted_stomp_message(
    pg_schema, nodes, tmp_path, spark
):
    url = schema_url(pg_schema)
    ports = [free_port(), free_port()]
    primary = nodes(stomp_ha_node("a", url, "shared-store-primary", ports[0]), name="a")
    await primary.wait_started(SLACK)
    backup = nodes(stomp_ha_node("b", url, "shared-store-backup", ports[1]), name="b")
    await backup.wait_for(r"node b: live is a, epoch 1", SLACK)

    run_dir = tmp_path / "run"
    by_port = dict(zip(ports, ("a", "b"), strict=True))
    producer = Peer(by_port, events.EventWriter(run_dir, "stomp-failover", "producer"))
    consumer = Peer(by_port, events.EventWriter(run_dir, "stomp-failover", "consumer"))
    consuming = deferToThread(consume, consumer)
    producing = deferToThread(produce, producer)
    try:
        await eventually(lambda: len(producer.receipts) >= KILL_AFTER, timeout=DEADLINE)
        live = backup.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK)
        killed = time.monotonic()
        await primary.stop(signal.SIGKILL)
        assert len(producer.receipts) < COUNT, "the producer finished before the kill"
        await live
        took = time.monotonic() - killed
        # A bound, not a benchmark: the lease expires reap after a's last renewal, and b
        # tries every ping.
        assert took <= REAP + PING + TAKEOVER_SLACK, (took, backup.output)
        await producing
        await eventually(
            lambda: {seq for seq, _ in consumer.received} >= set(range(COUNT)), timeout=DEADLINE
        )
    finally:
        consumer.stop.set()
        await consuming
        await deferToThread(producer.close)
        await deferToThread(consumer.close)
        for peer in (producer, consumer):
            await deferToThread(peer.trace.close)

    assert producer.generation == consumer.generation == 2  # both went over to b
    assert producer.receipts >= {f"r{seq}" for seq in range(COUNT)}
    assert {seq for seq, _ in consumer.received} == set(range(COUNT))
    assert len(consumer.received) > COUNT, "nothing was redelivered: nothing checked"
    check_failover(await deferToThread(audit, spark, run_dir), COUNT, consumer.received)
