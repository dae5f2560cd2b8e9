"""A real node process with a STOMP acceptor from its configuration file: stomp.py keeps a
durable topic subscription across a restart of the process: persistent messages sent
while the subscriber was away are there, non-persistent ones are not."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
import pytest_twisted
import stomp
from twisted.internet.threads import deferToThread

from tests.system.nodes import node_document

ACCEPTORS = [{"name": "stomp", "url": "tcp://127.0.0.1:0", "protocols": ["stomp"]}]


class Recorder(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.errors: list[Any] = []

    def on_message(self, frame: Any) -> None:
        self.messages.append(frame)

    def on_error(self, frame: Any) -> None:
        self.errors.append(frame)


def subscriber(port: int, until: int) -> list[bytes]:
    """Connect as client-id 'audit', subscribe durably, take ``until`` messages, leave."""
    conn = stomp.Connection12([("127.0.0.1", port)], auto_decode=False)
    recorder = Recorder()
    conn.set_listener("r", recorder)
    conn.connect(wait=True, headers={"client-id": "audit"})
    conn.subscribe("/topic/events", id="trail", ack="client", headers={"durable": "true"})
    deadline = time.monotonic() + 20
    while len(recorder.messages) < until and time.monotonic() < deadline:
        time.sleep(0.01)
    if recorder.messages:
        conn.ack(recorder.messages[-1].headers["ack"], receipt="acked")
    conn.disconnect(receipt="bye")
    return [m.body for m in recorder.messages]


def publish(port: int, *messages: tuple[bytes, bool]) -> None:
    conn = stomp.Connection12([("127.0.0.1", port)], auto_decode=False)
    conn.connect(wait=True)
    for body, persistent in messages:
        conn.send("/topic/events", body, headers={"persistent": "true"} if persistent else {})
    conn.disconnect(receipt="bye")


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_a_durable_subscription_survives_a_restart_of_the_node_process(nodes):
    document = node_document(acceptor=ACCEPTORS)
    node = await nodes(document).wait_started()
    port = node.ports["stomp"]
    assert await deferToThread(subscriber, port, 0) == []
    await deferToThread(publish, port, (b"kept", True), (b"lost at restart", False))
    await node.stop(signal.SIGTERM)
    assert node.ended.called
    again = await nodes(document, name="node").wait_started()
    port = again.ports["stomp"]
    assert await deferToThread(subscriber, port, 1) == [b"kept"]
    await deferToThread(publish, port, (b"after", True))
    assert await deferToThread(subscriber, port, 1) == [b"after"]
