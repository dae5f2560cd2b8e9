"""A large STOMP body through a real node process: stomp.py sends 40 MiB (ten times the
default ``max-frame-size``) as one persistent SEND and another stomp.py connection
receives it. The node streams the body to its large-message store and back out of it,
so its resident memory (sampled from /proc while the message passes) grows by far less
than the body; the body arrives byte for byte (same SHA-256), and its file goes once it
is acknowledged."""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import pytest
import pytest_twisted
import stomp
from twisted.internet.threads import deferToThread

from tests.system.flow import MIB, RssSampler, poll
from tests.system.nodes import node_document

pytestmark = pytest.mark.system

SIZE = 40 * MIB
NODE_GROWTH = 16 * MIB
"""What the node's RSS may grow by while the body passes: its buffers, not the body."""
ACCEPTORS = [{"name": "stomp", "url": "tcp://127.0.0.1:0", "protocols": ["stomp"]}]


class Recorder(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.errors: list[Any] = []
        self.receipts: list[str] = []

    def on_message(self, frame: Any) -> None:
        self.messages.append(frame)

    def on_error(self, frame: Any) -> None:
        self.errors.append(frame)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.append(frame.headers["receipt-id"])


def _connection(port: int) -> tuple[Any, Recorder]:
    conn = stomp.Connection12([("127.0.0.1", port)], auto_decode=False)
    recorder = Recorder()
    conn.set_listener("r", recorder)
    conn.connect(wait=True)
    return conn, recorder


def _wait(test: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout}s")
        time.sleep(0.01)


def send(port: int, body: bytes) -> None:
    conn, recorder = _connection(port)
    conn.send("/queue/big", body, headers={"persistent": "true", "receipt": "stored"})
    _wait(lambda: "stored" in recorder.receipts or recorder.errors, "receipt")
    assert not recorder.errors, [e.body for e in recorder.errors]
    conn.disconnect(receipt="bye")


def receive(port: int) -> tuple[int, bytes]:
    conn, recorder = _connection(port)
    conn.subscribe("/queue/big", id="s", ack="client-individual")
    _wait(lambda: recorder.messages or recorder.errors, "message")
    assert not recorder.errors, [e.body for e in recorder.errors]
    [message] = recorder.messages
    conn.ack(message.headers["ack"], receipt="acked")
    _wait(lambda: "acked" in recorder.receipts, "ack receipt")
    conn.disconnect(receipt="bye")
    return len(message.body), hashlib.sha256(message.body).digest()


@pytest.mark.timeout(240)
@pytest_twisted.ensureDeferred
async def test_a_forty_mebibyte_stomp_body_passes_in_bounded_node_memory(nodes):
    node = await nodes(node_document(acceptor=ACCEPTORS)).wait_started()
    port = node.ports["stomp"]
    body = os.urandom(SIZE).replace(b"\x00", b"\x01")  # stomp.py's reader copies at each NUL
    sampler = RssSampler({"node": node.pid or 0}).start()
    started = time.monotonic()
    await deferToThread(send, port, body)
    size, digest = await deferToThread(receive, port)
    elapsed = time.monotonic() - started
    sampler.stop()
    assert (size, digest) == (SIZE, hashlib.sha256(body).digest())
    print(f"\n{SIZE // MIB} MiB over STOMP in {elapsed:.1f} s; {sampler.describe()}")
    assert sampler.growth("node") < NODE_GROWTH, sampler.describe()
    large = node.directory / "var" / "a" / "large-messages"
    await poll(node, lambda _: not any(large.iterdir()), "the body file deleted")
