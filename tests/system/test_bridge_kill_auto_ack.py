"""kill -9 of a bridge's target whose consumer is a stomp.py ``ack:auto`` subscription.

Node B queues a bridged message before its write when every consumer of its queue is
``ack:auto``, so a kill can cut off a message B delivered before its id was written. The
bridge on A then sends it again marked as sent before, and B delivers it as a
redelivery. Every message that arrives twice carries ``redelivered:true`` every time
after the first, whichever way it came again (that resend, or B's recovery of a message
whose acknowledgement the kill cut off).

Messages sent to an ``ack:auto`` consumer count as consumed once handed to its
connection, so a kill may lose what sat in B's send buffer: no loss is asserted here;
``test_bridge_faults`` asserts none for a consumer that acknowledges.

SIZE: one producer x 6,000 durable 1 KiB messages, two kills of B."""

from __future__ import annotations

import signal
import threading
import time
from collections import defaultdict
from typing import Any

import pytest
import pytest_twisted
import stomp
from twisted.internet.threads import deferToThread

from tests.forward.conftest import eventually
from tests.system.bridges import (
    Producers,
    bridge_table,
    core_acceptor,
    free_port,
    wait_queue_empty,
)
from tests.system.nodes import node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

COUNT = 6000
KILLS = 2
STEP = COUNT // (KILLS + 2)
"""Messages B delivers between two kills."""
RETRY = 0.05
"""Between the consumer's connection attempts while B is down."""
DEADLINE = 180.0


class AutoAckConsumer(stomp.ConnectionListener):  # type: ignore[misc]
    """A stomp.py ``ack:auto`` subscription to ``orders`` on one port, made again after
    a lost connection; it records whether each arrival was flagged as a redelivery."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.arrivals: dict[tuple[str, int], list[bool]] = defaultdict(list)
        self.connections = 0
        self._lock = threading.Lock()
        self._lost = threading.Event()
        self._stopping = threading.Event()

    def on_message(self, frame: Any) -> None:
        headers = frame.headers
        with self._lock:
            self.arrivals[(headers["producer"], int(headers["seq"]))].append(
                headers.get("redelivered") == "true"
            )

    def on_disconnected(self) -> None:
        self._lost.set()

    def distinct(self) -> int:
        return len(self.arrivals)

    def run(self) -> None:
        deadline = time.monotonic() + DEADLINE
        while not self._stopping.is_set():
            assert time.monotonic() < deadline, "the consumer ran out of time"
            self._lost.clear()
            conn = stomp.Connection12([("127.0.0.1", self.port)], auto_decode=False)
            conn.set_listener("c", self)
            try:
                conn.connect(wait=True)
            except (stomp.exception.ConnectFailedException, OSError):
                # B is restarting (a connection it reset mid-CONNECT is no different):
                # nothing to wait on but time
                self._stopping.wait(RETRY)
                continue
            self.connections += 1
            conn.subscribe("/queue/orders", id="c", ack="auto")
            while not self._stopping.is_set() and not self._lost.wait(RETRY):
                pass
            if conn.is_connected():
                conn.disconnect()

    def stop(self) -> None:
        self._stopping.set()


@pytest_twisted.ensureDeferred
async def test_every_message_arriving_again_after_a_kill_is_flagged_as_a_redelivery(nodes):
    core_port, stomp_port = free_port(), free_port()
    stomp_acceptor = {
        "name": "stomp",
        "url": f"tcp://127.0.0.1:{stomp_port}",
        "protocols": ["stomp"],
    }
    b_document = node_document(
        "b",
        address=[{"name": "orders", "routing": "anycast"}],
        acceptor=[*core_acceptor(core_port), stomp_acceptor],
    )
    b = await nodes(b_document, name="b").wait_started()
    a_document = node_document(
        "a",
        address=[{"name": "orders", "routing": "anycast"}],
        acceptor=core_acceptor(),
        bridge=[bridge_table("a-to-b", "orders", b.core_url, **{"use-duplicate-detection": True})],
    )
    a = await nodes(a_document, name="a").wait_started()
    consumer = AutoAckConsumer(stomp_port)
    consuming = deferToThread(consumer.run)
    producers = Producers(
        lambda: a.core_url,
        "orders",
        producers=1,
        count=COUNT,
        ahead=200,
        paced_by=consumer.distinct,
        lead=1000,
    ).start()
    try:
        for kill in range(1, KILLS + 1):
            await eventually(lambda n=kill: consumer.distinct() >= n * STEP, 60)
            assert not producers.finished, f"the producer finished before kill {kill}"
            await b.stop(signal.SIGKILL)
            b = await nodes(b_document, name="b").wait_started()
        await producers.done(timeout=120)
        await wait_queue_empty(a, "orders")
        await wait_queue_empty(b, "orders")
    finally:
        consumer.stop()
        await consuming
        await producers.stop()
    arrivals = dict(consumer.arrivals)
    twice = {key: flags for key, flags in arrivals.items() if len(flags) > 1}
    print(
        f"\n{producers.total_confirmed} confirmed, {len(arrivals)} distinct on B, "
        f"{sum(map(len, arrivals.values()))} arrivals, {len(twice)} arrived more than once, "
        f"{consumer.connections} consumer connections"
    )
    assert consumer.connections >= KILLS + 1, "the consumer did not outlive the kills"
    unflagged = [key for key, flags in twice.items() if not all(flags[1:])]
    assert not unflagged, f"arrived again without redelivered:true: {sorted(unflagged)[:5]}"
    assert len(arrivals) >= producers.total_confirmed * 0.9, "few messages arrived"
