"""An address declared with both routing types in a real node's configuration file
(``routing = ["anycast", "multicast"]``): stomp.py's ``/queue/feed`` and ``/topic/feed``
work side by side on it, a queue send reaching the queue's consumer only and a topic send
every topic subscriber only."""

from __future__ import annotations

import time
from typing import Any

import pytest
import pytest_twisted
import stomp
from twisted.internet.threads import deferToThread

from tests.system.nodes import node_document

pytestmark = pytest.mark.system

ACCEPTORS = [{"name": "stomp", "url": "tcp://127.0.0.1:0", "protocols": ["stomp"]}]


class Recorder(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.receipts: list[str] = []
        self.errors: list[Any] = []

    def on_message(self, frame: Any) -> None:
        self.bodies.append(frame.body)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.append(frame.headers["receipt-id"])

    def on_error(self, frame: Any) -> None:
        self.errors.append(frame)


def _wait(test: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout}s")
        time.sleep(0.01)


def exchange(port: int) -> dict[str, list[bytes]]:
    """Two topic subscribers and a queue consumer on ``feed``; a producer sends to each
    prefix; what each one got once the last send's receipt is in and the expected count
    arrived."""
    connections = {}
    for name in ("topic-1", "topic-2", "queue", "producer"):
        conn = stomp.Connection12([("127.0.0.1", port)], auto_decode=False)
        recorder = Recorder()
        conn.set_listener("r", recorder)
        conn.connect(wait=True)
        connections[name] = (conn, recorder)
    for name, destination in (("topic-1", "/topic/feed"), ("topic-2", "/topic/feed")):
        conn, recorder = connections[name]
        conn.subscribe(destination, id="s", headers={"receipt": "sub"})
        _wait(lambda r=recorder: "sub" in r.receipts, "subscription receipt")
    conn, recorder = connections["queue"]
    conn.subscribe("/queue/feed", id="s", headers={"receipt": "sub"})
    _wait(lambda: "sub" in recorder.receipts, "subscription receipt")
    producer, sent = connections["producer"]
    producer.send("/topic/feed", b"tick", headers={"persistent": "true"})
    producer.send("/queue/feed", b"job", headers={"persistent": "true", "receipt": "done"})
    _wait(lambda: "done" in sent.receipts, "send receipt")
    for name in ("topic-1", "topic-2", "queue"):
        _wait(lambda r=connections[name][1]: bool(r.bodies), f"message for {name}")
    got = {name: recorder.bodies for name, (_, recorder) in connections.items()}
    assert not any(recorder.errors for _, recorder in connections.values())
    for conn, _ in connections.values():
        conn.disconnect(receipt="bye")
    return got


@pytest_twisted.ensureDeferred
async def test_queue_and_topic_of_an_address_with_both_routing_types(nodes):
    address = [{"name": "feed", "routing": ["anycast", "multicast"]}]
    node = await nodes(node_document(acceptor=ACCEPTORS, address=address)).wait_started()
    got = await deferToThread(exchange, node.ports["stomp"])
    assert got == {"topic-1": [b"tick"], "topic-2": [b"tick"], "queue": [b"job"], "producer": []}
