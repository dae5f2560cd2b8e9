"""A node process whose data directory is a small tmpfs, filled up: a failed
acknowledgement leaves the message on its queue, unacknowledged, and says so; a large send
is refused naming the cause, the connection kept; the node logs no unhandled error.

Mounting needs root: without it the tests skip with the reason, and fail under CI."""

from __future__ import annotations

import errno
import io
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from bridge.client.api import connect
from bridge.client.errors import ClientError
from tests.system.nodes import NodeProcess, node_document

SIZE = "8m"
TIMEOUT = 60.0
QUEUE = "orders"


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A tmpfs of SIZE mounted on a fresh directory; unmounted whatever happens."""
    where = Path(tempfile.mkdtemp(prefix="txbridge-full-"))
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(where)],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError as missing:
        mounted = subprocess.CompletedProcess([], 1, "", str(missing))
    if mounted.returncode != 0:
        where.rmdir()
        reason = f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        where.rmdir()


def fill(disk: Path) -> Path:
    """Write a file until the file system is full; returns it (delete it to make room)."""
    filler = disk / "filler"
    block = b"\0" * 65536
    with filler.open("wb", buffering=0) as file:
        try:
            while True:
                file.write(block)
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
        # The last blocks, smaller than one write: a page at a time.
        try:
            while True:
                file.write(block[:4096])
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
    return filler


def document(disk: Path) -> dict[str, object]:
    base = node_document(address=[{"name": QUEUE, "routing": "anycast"}])
    base["node"] = {"name": "a", "data-dir": str(disk / "data")}
    return base


def assert_no_unhandled_error(node: NodeProcess) -> None:
    for marker in ("Unhandled", "Traceback", "[stderr#error]", "OSError"):
        assert marker not in node.output, node.output


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_a_failed_acknowledgement_leaves_the_message_on_its_queue(
    nodes, small_disk: Path
) -> None:
    node = await nodes(document(small_disk)).wait_started()
    client = await connect(reactor, node.core_url)
    await client.send(QUEUE, b"kept")
    consumer = await client.consumer(QUEUE, window_size=0)
    message = await consumer.receive()
    filler = fill(small_disk)
    try:
        with pytest.raises(ClientError) as failed:
            await message.ack_durably()
        text = str(failed.value)
        assert "not stored" in text and "back on queue 'orders'" in text, text
        assert "full" in text or "No space left on device" in text, text
        # Unacknowledged and back in its place: closing the consumer, a browser sees it.
        await consumer.close()
        browser = await client.consumer(QUEUE, browse_only=True)
        seen = await browser.receive()
        assert seen.body == b"kept"
        await browser.close()
    finally:
        filler.unlink()
    # With room again it is delivered again, as a redelivery, and its ack holds.
    again = await client.consumer(QUEUE, window_size=0)
    redelivered = await again.receive()
    assert (redelivered.body, redelivered.redelivered) == (b"kept", True)
    await redelivered.ack_durably()
    await client.close()
    assert_no_unhandled_error(node)


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_a_large_send_on_a_full_disk_is_refused_naming_the_cause(
    nodes, small_disk: Path
) -> None:
    node = await nodes(document(small_disk)).wait_started()
    client = await connect(reactor, node.core_url)
    filler = fill(small_disk)
    try:
        body = io.BytesIO(os.urandom(2 * 2**20))
        with pytest.raises(ClientError) as failed:
            await client.send(QUEUE, body)
        text = str(failed.value)
        assert "No space left on device" in text, text
        assert str(small_disk / "data") in text, text
    finally:
        filler.unlink()
    # The connection is kept: with room again the same client sends and receives.
    assert not client.is_closed
    await client.send(QUEUE, io.BytesIO(b"x" * 2**20))
    consumer = await client.consumer(QUEUE)
    message = await consumer.receive()
    assert len(message.body) == 2**20
    await message.ack_durably()
    await client.close()
    assert_no_unhandled_error(node)


class StompSocket:
    """A STOMP connection over a plain blocking socket: frames out, frames in."""

    def __init__(self, port: int) -> None:
        self._socket = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self._data = b""

    def send(self, command: str, body: str = "", **headers: str) -> None:
        lines = "".join(f"{key.replace('_', '-')}:{value}\n" for key, value in headers.items())
        self._socket.sendall(f"{command}\n{lines}\n{body}\0".encode())

    def frame(self) -> tuple[str, dict[str, str], str]:
        """The next frame (heart-beat newlines skipped): command, headers, body."""
        while True:
            self._data = self._data.lstrip(b"\r\n")
            if b"\0" in self._data:
                raw, _, self._data = self._data.partition(b"\0")
                head, _, body = raw.decode().partition("\n\n")
                command, *lines = head.split("\n")
                headers = dict(line.split(":", 1) for line in lines)
                return command, headers, body
            chunk = self._socket.recv(65536)
            assert chunk, "the node closed the connection"
            self._data += chunk

    def close(self) -> None:
        self._socket.close()


def stomp_ack_on_a_full_disk(port: int, disk: Path) -> tuple[str, str, str]:
    """Send, take the message, fill the disk, ACK it with a receipt; then free the disk
    and take it again on a new connection. Returns the answer to the ACK (command and
    body) and the body taken again."""
    first = StompSocket(port)
    first.send("CONNECT", accept_version="1.2", host="/")
    assert first.frame()[0] == "CONNECTED"
    first.send("SEND", "kept", destination=f"/queue/{QUEUE}", persistent="true", receipt="sent")
    first.send("SUBSCRIBE", id="1", destination=f"/queue/{QUEUE}", ack="client-individual")
    frames = [first.frame(), first.frame()]
    [(_, delivery, _)] = [frame for frame in frames if frame[0] == "MESSAGE"]
    filler = fill(disk)
    try:
        first.send("ACK", id=delivery["ack"], receipt="acked")
        # The message may come back to this subscription before the ERROR that ends it.
        command, _, body = first.frame()
        while command == "MESSAGE":
            command, _, body = first.frame()
    finally:
        filler.unlink()
        first.close()
    again = StompSocket(port)
    again.send("CONNECT", accept_version="1.2", host="/")
    assert again.frame()[0] == "CONNECTED"
    again.send("SUBSCRIBE", id="1", destination=f"/queue/{QUEUE}", ack="auto")
    _, _, taken = again.frame()
    again.close()
    return command, body, taken


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_a_stomp_ack_on_a_full_disk_is_an_error_and_the_message_stays(
    nodes, small_disk: Path
) -> None:
    stomp = [{"name": "stomp", "url": "tcp://127.0.0.1:0", "protocols": ["stomp"]}]
    node = await nodes({**document(small_disk), "acceptor": stomp}).wait_started()
    command, body, taken = await deferToThread(
        stomp_ack_on_a_full_disk, node.ports["stomp"], small_disk
    )
    assert command == "ERROR"
    assert "back on queue 'orders', unacknowledged" in body, body
    assert taken == "kept"  # on its queue still
    assert_no_unhandled_error(node)
