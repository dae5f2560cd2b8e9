"""Producer and consumer processes of the benchmark scenarios: traced clients (the
``trace`` option of ``connect``) that write their event logs into the run folder, sample
their own RSS into it, and print JSON event lines for the parent.

    python -m benchmarks.scenarios.drivers producer --url URL --run-dir DIR --run ID \
        --name producer-0 --count N [--size BYTES] [--non-durable] [--large] \
        [--duplicate-ids] [--reconnect SECONDS]
    python -m benchmarks.scenarios.drivers consumer --url URL --run-dir DIR --run ID \
        --name consumer-0 [--ack-every K] [--rate BYTES_PER_S] [--reconnect SECONDS]

The producer sends as long as its client is writable and waits on ``when_writable``
otherwise, then prints ``done``. With ``--large`` each body is a file of ``--size`` bytes
(streamed in chunks, the address's producer credit respected); with ``--duplicate-ids``
each send carries the duplicate-detection id ``PRODUCER:SEQ``, so a resend after a node
crash is stored once; with ``--reconnect`` the client reconnects for ever at that interval
and resends what was unconfirmed.

The consumer acknowledges cumulatively every ``--ack-every`` messages, prints
``progress`` lines, and ends once it has as many messages as the line ``sent N`` on its
standard input says were sent, or when none has come for ``--idle`` seconds after that
line (the audit then says which were lost), or at the line ``stop`` (the parent's
decision, when several consumers share the queue). With ``--rate`` it is slow: it takes
one message at a time (``receive()``) and waits size / rate seconds after each.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import IO, Any

from twisted.internet import reactor, stdio
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import LoopingCall, deferLater
from twisted.logger import globalLogBeginner, textFileLogObserver
from twisted.protocols.basic import LineReceiver
from twisted.python.failure import Failure

from benchmarks.peers import current_rss, emit
from bridge import events
from bridge.client.api import NO_RECONNECT, Client, ReceivedMessage, connect
from bridge.client.api import Consumer as QueueConsumer
from bridge.client.errors import ClientError
from transport.allocator import tune_allocator
from transport.reconnect import ReconnectPolicy

QUEUE = "bench"
RSS_EVERY = 0.5
PROGRESS_EVERY = 0.2


def sample_rss(writer: events.EventWriter) -> LoopingCall:
    """Record this process's RSS now and every ``RSS_EVERY`` seconds."""
    call = LoopingCall(lambda: writer.record(events.RSS_SAMPLE, size=current_rss()))
    call.start(RSS_EVERY)
    return call


class Producer:
    """Sends ``count`` messages of ``size`` bytes as fast as the client is writable."""

    def __init__(self, client: Client, args: argparse.Namespace) -> None:
        self.client = client
        self.name = args.name
        self.count = args.count
        self.body = b"x" * args.size
        self.body_path: str | None = None
        self.durable = not args.non_durable
        self.duplicate_ids = args.duplicate_ids
        self.sent = 0
        self.settled = 0
        self.refused = 0
        self.done: Deferred[None] = Deferred()

    def pump(self, _: object = None) -> None:
        if self.body_path is not None:
            self.pump_large()
            return
        client, send, body, durable = self.client, self.client.send_nowait, self.body, self.durable
        if self.duplicate_ids:
            name = self.name
            while self.sent < self.count and client.is_writable:
                seq = self.sent
                send(
                    QUEUE,
                    body,
                    {events.TRACE_PRODUCER: name, events.TRACE_SEQ: seq},
                    durable=durable,
                    duplicate_id=f"{name}:{seq}".encode(),
                    on_settled=self.on_settled,
                )
                self.sent += 1
        else:
            while self.sent < self.count and client.is_writable:
                send(QUEUE, body, durable=durable, on_settled=self.on_settled)
                self.sent += 1
        if self.sent < self.count:
            client.when_writable().addCallbacks(self.pump, self.failed)

    def pump_large(self) -> None:
        """One file body per send while the address has credit (it streams in chunks)."""
        client = self.client
        assert self.body_path is not None
        while self.sent < self.count and client.address_writable(QUEUE):
            seq = self.sent
            body = open(self.body_path, "rb")  # noqa: SIM115 - open until settled
            headers = {events.TRACE_PRODUCER: self.name, events.TRACE_SEQ: seq}
            client.send_nowait(
                QUEUE,
                body,
                headers,
                durable=self.durable,
                duplicate_id=f"{self.name}:{seq}".encode() if self.duplicate_ids else None,
                on_settled=partial(self.on_settled_file, body),
            )
            self.sent += 1
        if self.sent < self.count:
            client.when_writable(QUEUE).addCallbacks(self.pump, self.failed)

    def on_settled_file(self, body: IO[bytes], error: ClientError | None) -> None:
        body.close()
        self.on_settled(error)

    def on_settled(self, error: ClientError | None) -> None:
        self.settled += 1
        self.refused += error is not None
        if self.settled == self.count and not self.done.called:
            self.done.callback(None)

    def failed(self, failure: Failure) -> None:
        if not self.done.called:
            self.done.errback(failure)


class Consumer:
    """Counts and acknowledges messages; ends once it has all that were sent."""

    def __init__(self, ack_every: int, idle: float) -> None:
        self.ack_every = max(1, ack_every)
        self.idle = idle
        self.received = 0
        self.bytes = 0
        self.expected: int | None = None
        self.last_message: ReceivedMessage | None = None
        self.unacked = False
        self.last_time = time.monotonic()
        self.waiting: Deferred[ReceivedMessage] | None = None
        """A slow consumer's ``receive()``, cancelled when it is done."""
        self.done: Deferred[None] = Deferred()

    def on_message(self, message: ReceivedMessage) -> None:
        self.received += 1
        if message.is_large:
            body = message.body_file
            self.bytes += body.seek(0, os.SEEK_END)
            body.close()
        else:
            self.bytes += len(message.body)
        self.last_message = message
        self.last_time = time.monotonic()
        self.unacked = bool(self.received % self.ack_every)
        if not self.unacked:
            message.ack(cumulative=True)
        self.check()

    def check(self) -> None:
        if self.done.called or self.expected is None:
            return
        if self.received >= self.expected or time.monotonic() - self.last_time > self.idle:
            self.done.callback(None)

    def stop(self) -> None:
        if not self.done.called:
            self.done.callback(None)

    def failed(self, failure: Failure) -> None:
        if not self.done.called:
            self.done.errback(failure)

    def tick(self) -> None:
        emit("progress", received=self.received)
        self.check()


class _Expect(LineReceiver):
    """Reads ``sent N`` from the parent on standard input."""

    delimiter = b"\n"

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    def lineReceived(self, line: bytes) -> None:
        word, _, number = line.decode().partition(" ")
        if word == "stop":
            self.consumer.stop()
        elif word == "sent":
            self.consumer.expected = int(number)
            self.consumer.last_time = max(self.consumer.last_time, time.monotonic())
            self.consumer.check()


def _writer(args: argparse.Namespace) -> events.EventWriter:
    return events.EventWriter(Path(args.run_dir), args.run, args.name)


def _reconnect(args: argparse.Namespace) -> ReconnectPolicy:
    """For ever at ``--reconnect`` seconds, or not at all."""
    if not args.reconnect:
        return NO_RECONNECT
    interval = args.reconnect
    return ReconnectPolicy(
        retry_interval=interval, max_retry_interval=interval, reconnect_attempts=-1
    )


async def produce(args: argparse.Namespace) -> None:
    writer = _writer(args)
    rss = sample_rss(writer)
    client = await connect(
        reactor,
        args.url,
        trace=writer,
        confirmation_window_size=args.window,
        reconnect=_reconnect(args),
    )
    producer = Producer(client, args)
    with tempfile.TemporaryDirectory(prefix="txbridge-bench-producer-") as folder:
        if args.large:
            producer.body_path = os.path.join(folder, "body")
            with open(producer.body_path, "wb") as body:
                body.write(os.urandom(args.size))
        emit("connected")
        started = time.monotonic()
        producer.pump()
        await producer.done
        elapsed = time.monotonic() - started
    emit("done", sent=producer.sent, refused=producer.refused, seconds=elapsed)
    await client.close()
    rss.stop()
    writer.close()


async def take_slowly(queue: QueueConsumer, consumer: Consumer, rate: float) -> None:
    """Take one message at a time, then wait its size / ``rate`` seconds."""
    while not consumer.done.called:
        consumer.waiting = queue.receive()
        try:
            message = await consumer.waiting
        except (CancelledError, ClientError):
            return
        consumer.waiting = None
        before = consumer.bytes
        consumer.on_message(message)
        await deferLater(reactor, (consumer.bytes - before) / rate)


async def consume(args: argparse.Namespace) -> None:
    writer = _writer(args)
    rss = sample_rss(writer)
    consumer = Consumer(args.ack_every, args.idle)
    stdio.StandardIO(_Expect(consumer))
    client = await connect(reactor, args.url, trace=writer, reconnect=_reconnect(args))
    if args.rate:
        queue = await client.consumer(args.queue, window_size=args.window)
        taking = Deferred.fromCoroutine(take_slowly(queue, consumer, args.rate))
        taking.addErrback(consumer.failed)
    else:
        await client.consumer(args.queue, window_size=args.window, on_message=consumer.on_message)
    emit("ready")
    ticks = LoopingCall(consumer.tick)
    ticks.start(PROGRESS_EVERY)
    await consumer.done
    ticks.stop()
    if consumer.waiting is not None:
        consumer.waiting.cancel()
    if consumer.last_message is not None and consumer.unacked:
        await consumer.last_message.ack_durably(cumulative=True)
    emit("done", received=consumer.received, bytes=consumer.bytes)
    await client.close()
    rss.stop()
    writer.close()


def _failed(failure: Failure) -> None:
    emit("error", message=f"{type(failure.value).__name__}: {failure.value}")


def run(main: Any, args: argparse.Namespace) -> int:
    finished = Deferred.fromCoroutine(main(args))
    finished.addErrback(_failed)
    finished.addBoth(lambda _: reactor.stop())
    if not finished.called:
        reactor.run()
    return 0


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="python -m benchmarks.scenarios.drivers")
    roles = main.add_subparsers(dest="role", required=True)
    producer = roles.add_parser("producer")
    consumer = roles.add_parser("consumer")
    for sub in (producer, consumer):
        sub.add_argument("--url", required=True)
        sub.add_argument("--run-dir", required=True)
        sub.add_argument("--run", required=True)
        sub.add_argument("--name", required=True, help="the process name in the event logs")
        sub.add_argument("--window", type=int, default=1024 * 1024, help="bytes")
        sub.add_argument("--reconnect", type=float, default=0.0, help="seconds; see above")
    producer.add_argument("--count", type=int, required=True)
    producer.add_argument("--size", type=int, default=1024, help="body bytes")
    producer.add_argument("--non-durable", action="store_true")
    producer.add_argument("--large", action="store_true", help="file bodies, streamed")
    producer.add_argument("--duplicate-ids", action="store_true", help="PRODUCER:SEQ ids")
    consumer.add_argument("--queue", default=QUEUE)
    consumer.add_argument("--ack-every", type=int, default=500)
    consumer.add_argument("--idle", type=float, default=5.0, help="seconds; see above")
    consumer.add_argument("--rate", type=float, default=0.0, help="bytes/s; see above")
    return main


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    tune_allocator()
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    return run(produce if args.role == "producer" else consume, args)


if __name__ == "__main__":
    sys.exit(main())
