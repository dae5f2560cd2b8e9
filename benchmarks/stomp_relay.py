"""A STOMP relay that stores and routes nothing: the ceiling of ``peers-stomp``'s rows.

Each SEND is passed on as it is read, its body streamed through one reused buffer: to the
one subscriber as a MESSAGE or, with ``--forward PORT``, to the next relay as the same
SEND (two relays are the A -> B cases' pair). Receipts are given once a frame is handed
on. No broker can deliver faster than this does with the same clients on the same
machine, since it does the least a broker must (read each frame, write it once), so a
row's goal above the relay's rate is out of reach here whatever the broker does.

It speaks just enough STOMP 1.2 for the benchmark's stomp.py clients (CONNECT, SUBSCRIBE,
SEND, DISCONNECT, no heart-beats, no transactions); a sender waits while no subscriber is
there. A benchmark tool, not a broker: it trusts its peers.

    python -m benchmarks.stomp_relay [--forward PORT]

prints ``{"event": "listening", "port": N}`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import itertools
import json
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

CHUNK = 1024 * 1024
"""Bytes read a call (a body streams through a buffer this size)."""
HEADERS_LIMIT = 64 * 1024
"""A frame's command and headers, at most."""
GATHER = 64 * 1024
"""Frames passed on are gathered up to this many bytes, or until the sender's next read,
and written in one call, as a broker writes what a turn of its loop produced; a larger
piece of a body is written on its own."""


class Closed(Exception):
    """The peer closed its connection."""


class Readable(Protocol):
    """What ``Frames`` reads from: a socket."""

    def recv_into(self, buffer: memoryview) -> int: ...


class Frames:
    """A connection's incoming frames: the command and headers of each, then its body
    read in pieces through one buffer."""

    def __init__(self, sock: Readable, before_read: Callable[[], None]) -> None:
        self.sock = sock
        self.before_read = before_read
        """Called before each read: what was passed on meanwhile goes out then."""
        self.buffer = bytearray(CHUNK)
        self.view = memoryview(self.buffer)
        self.start = 0
        self.end = 0

    def _fill(self) -> None:
        """Read more behind what is buffered (moved to the front first, so that a buffer
        read to its end starts over)."""
        if self.start:
            self.buffer[: self.end - self.start] = self.view[self.start : self.end]
            self.end -= self.start
            self.start = 0
        if self.end == len(self.buffer):
            raise ValueError(f"a frame's headers are over {HEADERS_LIMIT} bytes")
        self.before_read()
        got = self.sock.recv_into(self.view[self.end :])
        if not got:
            raise Closed
        self.end += got

    def head(self) -> tuple[bytes, dict[bytes, bytes], list[bytes]]:
        """The next frame's command, its headers (the first of each name) and their
        lines as read, heart-beat EOLs before it skipped."""
        while True:
            while self.start < self.end and self.buffer[self.start] in b"\r\n":
                self.start += 1
            found = self.buffer.find(b"\n\n", self.start, self.end)
            if found >= 0:
                break
            if self.end - self.start > HEADERS_LIMIT:
                raise ValueError(f"a frame's headers are over {HEADERS_LIMIT} bytes")
            self._fill()
        block = bytes(self.view[self.start : found])
        self.start = found + 2
        command, _, raw = block.partition(b"\n")
        lines = [line.rstrip(b"\r") for line in raw.split(b"\n") if line.strip(b"\r")]
        headers: dict[bytes, bytes] = {}
        for line in lines:
            name, _, value = line.partition(b":")
            headers.setdefault(name, value)
        return command.rstrip(b"\r"), headers, lines

    def body(self, headers: dict[bytes, bytes]) -> Iterator[memoryview]:
        """The frame's body in pieces (each valid until the next is asked for), then its
        NUL consumed: ``content-length`` bytes, or up to the NUL without one."""
        length = headers.get(b"content-length")
        if length is None:
            while (found := self.buffer.find(b"\0", self.start, self.end)) < 0:
                if self.end > self.start:
                    yield self.view[self.start : self.end]
                self.start = self.end
                self._fill()
            if found > self.start:
                yield self.view[self.start : found]
            self.start = found + 1
            return
        left = int(length)
        while left:
            if self.start == self.end:
                self._fill()
            take = min(left, self.end - self.start)
            yield self.view[self.start : self.start + take]
            self.start += take
            left -= take
        while self.start == self.end:
            self._fill()
        if self.buffer[self.start] != 0:
            raise ValueError("a frame's body is longer than its content-length")
        self.start += 1


class Relay:
    """Where SENDs go: the subscriber, or the next relay; senders wait for it."""

    def __init__(self) -> None:
        self.sink: socket.socket | None = None
        self.subscription = b""
        self.pending = bytearray()
        self.changed = threading.Condition()
        self.ids = itertools.count()

    def set_sink(self, sock: socket.socket, subscription: bytes = b"") -> None:
        with self.changed:
            self.sink, self.subscription = sock, subscription
            self.changed.notify_all()

    def pass_on(self, lines: list[bytes], headers: dict[bytes, bytes], frames: Frames) -> None:
        """A SEND's frame to the sink, as is to the next relay or as a MESSAGE to the
        subscriber (its ``receipt`` header left out: the receipt is this relay's)."""
        with self.changed:
            self.changed.wait_for(lambda: self.sink is not None)
            kept = [line for line in lines if not line.startswith(b"receipt:")]
            if self.subscription:
                kept[:0] = [
                    b"MESSAGE",
                    b"subscription:" + self.subscription,
                    b"message-id:%d" % next(self.ids),
                ]
            else:
                kept.insert(0, b"SEND")
            self.pending += b"\n".join(kept) + b"\n\n"
            for piece in frames.body(headers):
                if len(piece) < GATHER:
                    self.pending += piece
                else:
                    self._flush()
                    self._write(piece)
            self.pending += b"\0"
            if len(self.pending) >= GATHER:
                self._flush()

    def flush(self) -> None:
        """Write what was passed on and not yet written."""
        with self.changed:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            self._write(self.pending)
            self.pending.clear()

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        assert self.sink is not None
        self.sink.sendall(data)


def serve(sock: socket.socket, relay: Relay) -> None:
    """One client connection, frame by frame, until it disconnects or closes."""
    frames = Frames(sock, relay.flush)
    try:
        while True:
            command, headers, lines = frames.head()
            if command == b"SEND":
                relay.pass_on(lines, headers, frames)
            else:
                for _ in frames.body(headers):
                    pass
            if command in (b"CONNECT", b"STOMP"):
                sock.sendall(b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\0")
            elif command == b"SUBSCRIBE":
                relay.set_sink(sock, headers.get(b"id", b"0"))
            receipt = headers.get(b"receipt")
            if receipt is not None:
                relay.flush()
                sock.sendall(b"RECEIPT\nreceipt-id:%s\n\n\0" % receipt)
            if command == b"DISCONNECT":
                return
    except (Closed, ConnectionError):
        return
    finally:
        sock.close()


def forward_to(port: int) -> socket.socket:
    """A connection to the next relay, its answers read and dropped by a thread."""
    upstream = socket.create_connection(("127.0.0.1", port))
    upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    upstream.sendall(b"CONNECT\naccept-version:1.2\nhost:relay\n\n\0")

    def drain() -> None:
        try:
            while upstream.recv(CHUNK):
                pass
        except OSError:
            pass

    threading.Thread(target=drain, daemon=True).start()
    return upstream


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stomp_relay")
    parser.add_argument("--forward", type=int, help="pass SENDs on to the relay on this port")
    args = parser.parse_args(argv)
    relay = Relay()
    if args.forward is not None:
        relay.set_sink(forward_to(args.forward))
    listener = socket.create_server(("127.0.0.1", 0))
    # (the event line of ``benchmarks.peers.emit``, without loading Twisted for it)
    print(json.dumps({"event": "listening", "port": listener.getsockname()[1]}), flush=True)
    while True:
        sock, _ = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(sock, relay), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
