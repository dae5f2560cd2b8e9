"""Writer and reader processes for transport runs: the demo, the throughput benchmark and
the flow-control tests start these and read the JSON lines they print.

    python -m benchmarks.peers writer --url URL --bytes N --frame-size S [TLS options]
    python -m benchmarks.peers reader --url URL [--stall-every BYTES --stall-for SECONDS]
    python -m benchmarks.peers raw-writer / raw-reader   (plain sockets: the ceiling)

Each frame's payload starts with its sequence number, so a reader checks order; with
``--verify`` both sides keep a CRC-32 of every payload, so a reader checks the bytes too.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.logger import globalLogBeginner, textFileLogObserver
from twisted.python.failure import Failure
from zope.interface import implementer

from transport.allocator import tune_allocator
from transport.endpoints import connect, listen
from transport.frames import HEADER, MAGIC, VERSION, Frame
from transport.interfaces import IFrameConnection, IFrameReceiver
from transport.settings import ConnectionSettings
from transport.tls import TLSConfig

DATA = 16
SEQ_BYTES = 8


def emit(event: str, **fields: Any) -> None:
    """Print one JSON event line and flush it, so the parent sees it at once."""
    print(json.dumps({"event": event, "t": time.monotonic(), **fields}), flush=True)


def peak_rss() -> int:
    """This process's peak resident memory, in bytes.

    Read from VmHWM, which belongs to this program's own address space: getrusage's
    ru_maxrss survives fork and exec, so a child would report its parent's peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def current_rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Payloads:
    """Frame payloads of one size: the sequence number, then a fixed random block."""

    def __init__(self, size: int, seed: int = 7) -> None:
        if size < SEQ_BYTES:
            raise ValueError(f"frame size must be at least {SEQ_BYTES}")
        self.size = size
        self._block = (zlib.crc32(str(seed).encode()).to_bytes(4, "big") * (size // 4 + 1))[
            : size - SEQ_BYTES
        ]

    def make(self, seq: int) -> bytes:
        return seq.to_bytes(SEQ_BYTES, "big") + self._block


def tls_from(args: argparse.Namespace) -> TLSConfig | None:
    if not (args.cert or args.ca):
        return None
    return TLSConfig(
        cert=args.cert,
        key=args.key,
        ca=args.ca,
        verify_client=getattr(args, "verify_client", False),
    )


def settings_from(args: argparse.Namespace) -> ConnectionSettings:
    return ConnectionSettings(
        high_water=args.high_water,
        low_water=args.low_water,
        max_frame_size=max(args.frame_size, 1024),
        heartbeat_interval=None,
        ttl=None,
        io_size=int(os.environ.get("TXBRIDGE_IO_SIZE", str(256 * 1024))) or None,
    )


@implementer(IFrameReceiver)
class Writer:
    """Sends ``total`` bytes of frames as fast as writability allows, reporting each pause."""

    def __init__(self, args: argparse.Namespace, reactor: Any) -> None:
        self.reactor = reactor
        self.payloads = Payloads(args.frame_size)
        self.frames = max(1, args.bytes // args.frame_size)
        self.verify = args.verify
        self.stall_report = args.stall_report
        self.report_pauses = args.report_pauses or bool(args.stall_report)
        self.seq = 0
        self.written = 0
        self.crc = 0
        self.pauses = 0
        self.connection: IFrameConnection | None = None
        self.started = 0.0
        self.stall_check: Any = None
        self.done: Deferred[None] = Deferred()

    def connection_made(self, connection: IFrameConnection) -> None:
        self.connection = connection
        connection.add_writability_listener(self.writability_changed)
        self.started = time.monotonic()
        emit("connected")
        self.pump()

    def pump(self) -> None:
        connection = self.connection
        assert connection is not None
        payloads, verify = self.payloads, self.verify
        while self.seq < self.frames and connection.is_writable:
            payload = payloads.make(self.seq)
            if verify:
                self.crc = zlib.crc32(payload, self.crc)
            connection.send(DATA, payload)
            self.seq += 1
            self.written += len(payload)
        if self.seq == self.frames:
            self.seq += 1
            connection.close()

    def writability_changed(self, writable: bool) -> None:
        pending = getattr(self.connection, "pending_bytes", -1)
        if writable:
            if self.stall_check is not None and self.stall_check.active():
                self.stall_check.cancel()
            if self.report_pauses:
                emit("resumed", written=self.written, pending=pending)
            self.pump()
        else:
            self.pauses += 1
            if self.report_pauses:
                emit("paused", written=self.written, pending=pending)
            if self.stall_report:
                self.stall_check = self.reactor.callLater(self.stall_report, self.stalled)

    def stalled(self) -> None:
        emit("stalled", written=self.written, rss=current_rss())

    def frame_received(self, frame: Frame) -> None:
        """Readers send nothing back."""

    def connection_lost(self, reason: BaseException) -> None:
        elapsed = time.monotonic() - self.started
        if self.stall_check is not None and self.stall_check.active():
            self.stall_check.cancel()
        emit(
            "done",
            written=self.written,
            frames=min(self.seq, self.frames),
            crc=self.crc,
            pauses=self.pauses,
            elapsed=elapsed,
            reason=str(reason),
            peak_rss=peak_rss(),
        )
        self.done.callback(None)


@implementer(IFrameReceiver)
class Reader:
    """Receives frames, checking order (and bytes, with verify); can stall on a schedule."""

    def __init__(
        self,
        reactor: Any,
        verify: bool = False,
        stall_every: int = 0,
        stall_for: float = 0.0,
        stall_after_first: bool = False,
    ) -> None:
        self.reactor = reactor
        self.verify = verify
        self.stall_every = stall_every
        self.stall_for = stall_for
        self.stall_after_first = stall_after_first
        self.next_stall = stall_every
        self.expected = 0
        self.received = 0
        self.crc = 0
        self.first = 0.0
        self.last = 0.0
        self.error: str | None = None
        self.connection: IFrameConnection | None = None
        self.lost: Deferred[BaseException] = Deferred()

    def connection_made(self, connection: IFrameConnection) -> None:
        self.connection = connection

    def frame_received(self, frame: Frame) -> None:
        payload = frame.payload
        if not self.received:
            self.first = time.monotonic()
            if self.stall_after_first:
                assert self.connection is not None
                self.connection.pause_reading()
        seq = int.from_bytes(payload[:SEQ_BYTES], "big")
        if seq != self.expected and self.error is None:
            self.error = f"frame {seq} arrived where {self.expected} was expected"
        self.expected = seq + 1
        self.received += len(payload)
        if self.verify:
            self.crc = zlib.crc32(payload, self.crc)
        self.last = time.monotonic()
        if self.stall_every and self.received >= self.next_stall:
            self.next_stall += self.stall_every
            self.stall()

    def stall(self) -> None:
        assert self.connection is not None
        self.connection.pause_reading()
        emit("reader-stalled", received=self.received)
        self.reactor.callLater(self.stall_for, self.unstall)

    def unstall(self) -> None:
        assert self.connection is not None
        emit("reader-resumed", received=self.received)
        self.connection.resume_reading()

    def connection_lost(self, reason: BaseException) -> None:
        self.lost.callback(reason)

    def summary(self) -> dict[str, Any]:
        elapsed = self.last - self.first
        return {
            "received": self.received,
            "frames": self.expected,
            "crc": self.crc,
            "order_error": self.error,
            "elapsed": elapsed,
        }


def _failed(failure: Failure) -> None:
    """Tell the parent why, then end the process."""
    emit("error", message=str(failure.value))
    reactor.stop()


def run_writer(args: argparse.Namespace) -> int:
    emit("started", idle_rss=current_rss())
    writer = Writer(args, reactor)
    connect(
        reactor,
        args.url,
        writer,
        settings=settings_from(args),
        accepted_types=[DATA],
        tls=tls_from(args),
    ).addErrback(_failed)
    writer.done.addCallback(lambda _: reactor.stop())
    reactor.run()
    return 0


def run_reader(args: argparse.Namespace) -> int:
    def make() -> Reader:
        reader = Reader(reactor, args.verify, args.stall_every, args.stall_for)
        reader.lost.addCallback(lambda reason: finish(reader, reason))
        return reader

    def finish(reader: Reader, reason: BaseException) -> None:
        emit("received", **reader.summary(), reason=str(reason), peak_rss=peak_rss())
        if args.once:
            reactor.stop()

    def listening(port: Any) -> None:
        emit("listening", port=port.getHost().port, idle_rss=current_rss())

    listen(
        reactor,
        args.url,
        make,
        settings=settings_from(args),
        accepted_types=[DATA],
        tls=tls_from(args),
    ).addCallbacks(listening, _failed)
    reactor.run()
    return 0


def _raw_address(url: str) -> tuple[str, int, bool]:
    scheme, _, rest = url.partition("://")
    host, port = rest.rsplit(":", 1)
    return host, int(port), scheme == "tls"


def _raw_tls(args: argparse.Namespace, server: bool) -> ssl.SSLContext:
    if server:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(args.ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def run_raw_writer(args: argparse.Namespace) -> int:
    """Send the same framed bytes with plain blocking sockets: the ceiling for this machine."""
    payloads = Payloads(args.frame_size)
    frames = max(1, args.bytes // args.frame_size)
    host, port, tls = _raw_address(args.url)
    batch = max(1, (256 * 1024) // (args.frame_size + HEADER.size))
    header_of = HEADER.pack
    with socket.create_connection((host, port)) as plain:
        sock = (
            _raw_tls(args, server=False).wrap_socket(plain, server_hostname=host) if tls else plain
        )
        started = time.monotonic()
        seq = 0
        while seq < frames:
            parts = []
            for _ in range(min(batch, frames - seq)):
                payload = payloads.make(seq)
                parts.append(header_of(MAGIC, VERSION, DATA, len(payload)))
                parts.append(payload)
                seq += 1
            sock.sendall(b"".join(parts))
        if isinstance(sock, ssl.SSLSocket):
            sock = sock.unwrap()
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)
    emit("done", frames=frames, elapsed=time.monotonic() - started)
    return 0


def run_raw_reader(args: argparse.Namespace) -> int:
    host, port, tls = _raw_address(args.url)
    with socket.socket() as server:
        server.bind((host, port))
        server.listen(1)
        emit("listening", port=server.getsockname()[1])
        accepted, _ = server.accept()
        conn = (
            _raw_tls(args, server=True).wrap_socket(accepted, server_side=True) if tls else accepted
        )
        with conn:
            buffer = bytearray(1 << 20)
            view = memoryview(buffer)
            received = 0
            first = last = 0.0
            while True:
                n = conn.recv_into(view)
                if not n:
                    if isinstance(conn, ssl.SSLSocket):
                        conn.unwrap()
                    break
                if not received:
                    first = time.monotonic()
                received += n
                last = time.monotonic()
    emit("received", received=received, elapsed=last - first)
    return 0


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="python -m benchmarks.peers")
    roles = main.add_subparsers(dest="role", required=True)
    for role in ("writer", "reader", "raw-writer", "raw-reader"):
        sub = roles.add_parser(role)
        sub.add_argument("--url", required=True)
        sub.add_argument("--frame-size", type=int, default=1 << 20)
        sub.add_argument("--high-water", type=int, default=128 * 1024)
        sub.add_argument("--low-water", type=int, default=32 * 1024)
        sub.add_argument("--cert", type=Path)
        sub.add_argument("--key", type=Path)
        sub.add_argument("--ca", type=Path)
        sub.add_argument("--verify", action="store_true")
    for role in ("writer", "raw-writer"):
        roles.choices[role].add_argument("--bytes", type=int, required=True)
    writer = roles.choices["writer"]
    writer.add_argument(
        "--stall-report",
        type=float,
        default=0.0,
        help="report a stall once paused this long (seconds); implies --report-pauses",
    )
    writer.add_argument("--report-pauses", action="store_true", help="an event per pause/resume")
    reader = roles.choices["reader"]
    reader.add_argument("--verify-client", action="store_true")
    reader.add_argument("--stall-every", type=int, default=0)
    reader.add_argument("--stall-for", type=float, default=0.0)
    reader.add_argument("--once", action="store_true", help="exit after the first connection")
    return main


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    tune_allocator()
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    runner = {
        "writer": run_writer,
        "reader": run_reader,
        "raw-writer": run_raw_writer,
        "raw-reader": run_raw_reader,
    }[args.role]
    return runner(args)


if __name__ == "__main__":
    sys.exit(main())
