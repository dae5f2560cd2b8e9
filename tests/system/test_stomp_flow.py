"""A real node process under a BLOCK address-full policy, driven by stomp.py: a producer
over the full address stops being read (the node's memory for the address stays within
one message of ``max-size-bytes``) and goes on, in order, once a consumer drains it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import pytest_twisted
import stomp
from twisted.internet.threads import deferToThread

from tests.system.flow import KIB, address_of, poll, status
from tests.system.nodes import node_document

MAX_SIZE = 64 * KIB
BODY = 8 * KIB
COUNT = 64  # 512 KiB for a 64 KiB address
DEADLINE = 30.0


class Listener(stomp.ConnectionListener):  # type: ignore[misc]
    """What one stomp.py connection hears, with an event per kind."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.receipts: list[str] = []
        self.errors: list[Any] = []
        self.changed = threading.Condition()

    def on_message(self, frame: Any) -> None:
        with self.changed:
            self.messages.append(frame)
            self.changed.notify_all()

    def on_receipt(self, frame: Any) -> None:
        with self.changed:
            self.receipts.append(frame.headers["receipt-id"])
            self.changed.notify_all()

    def on_error(self, frame: Any) -> None:
        with self.changed:
            self.errors.append(frame)
            self.changed.notify_all()

    def wait(self, test: Any, what: str) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: test() or self.errors, DEADLINE):
                raise AssertionError(f"{what}: not within {DEADLINE}s")
        assert not self.errors, [error.headers for error in self.errors]


def connect(port: int) -> tuple[Any, Listener]:
    conn = stomp.Connection12([("127.0.0.1", port)], auto_decode=False)
    listener = Listener()
    conn.set_listener("l", listener)
    conn.connect(wait=True)
    return conn, listener


def produce(port: int) -> None:
    """Send everything persistent, then wait for the receipt of the last send."""
    conn, listener = connect(port)
    for n in range(COUNT):
        headers = {"persistent": "true", "seq": str(n)}
        if n == COUNT - 1:
            headers["receipt"] = "last"
        conn.send("/queue/blocked", b"p" * BODY, headers=headers)
    listener.wait(lambda: "last" in listener.receipts, "the last send's receipt")
    conn.disconnect()


def take(port: int, queue: str, count: int) -> list[Any]:
    """Subscribe to ``/queue/QUEUE`` and acknowledge ``count`` messages one by one."""
    conn, listener = connect(port)
    conn.subscribe(f"/queue/{queue}", id="c", ack="client-individual")
    for taken in range(count):
        listener.wait(lambda n=taken: len(listener.messages) > n, f"message {taken}")
        conn.ack(listener.messages[taken].headers["ack"])
    conn.disconnect(receipt="bye")
    return listener.messages


def consume(port: int) -> list[str]:
    return [frame.headers["seq"] for frame in take(port, "blocked", COUNT)]


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_a_producer_over_a_full_block_address_waits_then_delivers_in_order(nodes):
    document = node_document(
        acceptor=[{"name": "stomp", "url": "tcp://127.0.0.1:0", "protocols": ["stomp"]}],
        **{
            "address-setting": [
                {"match": "blocked", "max-size-bytes": MAX_SIZE, "address-full-policy": "BLOCK"}
            ]
        },
    )
    node = await nodes(document).wait_started()
    port = node.ports["stomp"]
    produced = deferToThread(produce, port)
    await poll(node, lambda d: d["producers_blocked"] == 1, "the producer is blocked")
    started = time.monotonic()
    while time.monotonic() - started < 1.0:  # it stays so while nobody consumes
        document = await status(node)
        blocked = address_of(document, "blocked")
        assert blocked["full"] and blocked["memory_bytes"] <= MAX_SIZE + BODY + KIB
        assert document["producers_blocked"] == 1
    assert not produced.called
    assert await deferToThread(consume, port) == [str(n) for n in range(COUNT)]
    await produced
    done = await poll(node, lambda d: d["producers_blocked"] == 0, "nobody is blocked")
    assert address_of(done, "blocked")["memory_bytes"] == 0
