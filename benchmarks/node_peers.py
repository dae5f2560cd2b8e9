"""Producer and consumer processes of the node benchmark: clients of a running node that
print JSON event lines (``benchmarks.peers.emit``) for ``benchmarks.node_throughput``.

    python -m benchmarks.node_peers producer --url URL --count N [--durable] [--seconds S]
    python -m benchmarks.node_peers consumer --url URL --count N [--ack-every K]

Every body is ``--size`` bytes starting with its sequence number (``benchmarks.peers.Payloads``),
so the consumer checks order, loss and duplicates.

- The **producer** sends with ``Client.send_nowait`` as long as the client is writable
  (connected, confirmation window not full, connection under its high-water mark), and
  waits on ``when_writable`` otherwise. Every send's confirmation callback records the
  time from its send to its confirmation. It stops after ``--count`` sends or ``--seconds``
  of sending, whichever comes first, and reports once every send is settled.
- The **consumer** takes messages with an ``on_message`` callback and acknowledges
  cumulatively every ``--ack-every`` messages (and the last one durably). It ends after
  ``--count`` messages, or after as many as the line ``sent N`` on its standard input says
  were sent (a producer stopped by its time bound sends fewer than ``--count``).

Times are ``time.monotonic()``, which is one clock for every process on Linux, so the
parent subtracts the producer's first send from the consumer's last receipt.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from typing import Any

from twisted.internet import reactor, stdio
from twisted.internet.defer import Deferred
from twisted.logger import globalLogBeginner, textFileLogObserver
from twisted.protocols.basic import LineReceiver
from twisted.python.failure import Failure

from benchmarks.peers import SEQ_BYTES, Payloads, current_rss, emit, peak_rss
from bridge.client.api import Client, ReceivedMessage, connect
from bridge.client.errors import ClientError
from transport.allocator import tune_allocator

QUEUE = "bench"
TIME_CHECK_EVERY = 1024


def cpu_seconds() -> float:
    """CPU time this process used so far (user + system)."""
    times = os.times()
    return times.user + times.system


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted list (0.0 if it is empty)."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


class Producer:
    """Sends ``count`` messages (or for ``seconds``) and times each confirmation."""

    def __init__(self, client: Client, args: argparse.Namespace) -> None:
        self.client = client
        self.count = args.count
        self.seconds = args.seconds
        self.durable = args.durable
        self.address = args.address
        self.payloads = Payloads(args.size)
        self.sample_every = max(1, args.sample_every)
        self.sent = 0
        self.confirmed = 0
        self.refused = 0
        self.first_error: str | None = None
        self.latencies: list[float] = []
        self.stopped = False
        self.first_send = 0.0
        self.last_confirm = 0.0
        self.deadline = 0.0
        self.waits = 0
        self.done: Deferred[None] = Deferred()

    def start(self) -> None:
        self.first_send = time.monotonic()
        self.deadline = self.first_send + self.seconds
        self.pump()

    def pump(self, _: object = None) -> None:
        client, payloads, count = self.client, self.payloads, self.count
        send, address, durable = client.send_nowait, self.address, self.durable
        settled, timed, every = self.settled, self.timed, self.sample_every
        monotonic = time.monotonic
        sent = self.sent
        while sent < count and not self.stopped and client.is_writable:
            body = payloads.make(sent)
            if sent % every:
                send(address, body, durable=durable, on_settled=settled)
            else:
                send(address, body, durable=durable, on_settled=partial(timed, monotonic()))
            sent += 1
            if not sent % TIME_CHECK_EVERY and monotonic() >= self.deadline:
                self.stopped = True
        self.sent = sent
        if sent >= count or self.stopped:
            self.stopped = True
            self.check_done()
        else:
            self.waits += 1
            client.when_writable().addCallbacks(self.pump, self.failed)

    def timed(self, started: float, error: ClientError | None) -> None:
        now = time.monotonic()
        self.latencies.append(now - started)
        self.settled(error)

    def settled(self, error: ClientError | None) -> None:
        if error is None:
            self.confirmed += 1
        else:
            self.refused += 1
            if self.first_error is None:
                self.first_error = str(error)
        if self.stopped and self.confirmed + self.refused == self.sent:
            self.check_done()

    def check_done(self) -> None:
        if self.confirmed + self.refused == self.sent and not self.done.called:
            self.last_confirm = time.monotonic()
            self.done.callback(None)

    def failed(self, failure: Failure) -> None:
        if not self.done.called:
            self.done.errback(failure)

    def summary(self) -> dict[str, Any]:
        latencies = sorted(self.latencies)
        return {
            "sent": self.sent,
            "confirmed": self.confirmed,
            "refused": self.refused,
            "first_error": self.first_error,
            "time_bounded": self.sent < self.count,
            "first_send": self.first_send,
            "last_confirm": self.last_confirm,
            "latency_samples": len(latencies),
            "latency_p50": percentile(latencies, 0.50),
            "latency_p99": percentile(latencies, 0.99),
            "latency_max": latencies[-1] if latencies else 0.0,
            "writability_waits": self.waits,
        }


class Consumer:
    """Counts messages, checks their order and acknowledges them cumulatively."""

    def __init__(self, count: int, ack_every: int) -> None:
        self.expected_total = count
        self.ack_every = max(1, ack_every)
        self.received = 0
        self.next_seq = 0
        self.out_of_order = 0
        self.duplicates = 0
        self.redelivered = 0
        self.first = 0.0
        self.last = 0.0
        self.done: Deferred[ReceivedMessage | None] = Deferred()

    def on_message(self, message: ReceivedMessage) -> None:
        now = time.monotonic()
        if not self.received:
            self.first = now
        self.last = now
        self.received += 1
        seq = int.from_bytes(message.body[:SEQ_BYTES], "big")
        if seq != self.next_seq:
            if seq < self.next_seq:
                self.duplicates += 1
            else:
                self.out_of_order += 1
        self.next_seq = max(self.next_seq, seq + 1)
        if message.delivery_count > 1:
            self.redelivered += 1
        if self.received >= self.expected_total:
            if not self.done.called:
                self.done.callback(message)
        elif not self.received % self.ack_every:
            message.ack(cumulative=True)

    def expect(self, total: int) -> None:
        """The producer sent ``total``; end once they are all here (now, if they are)."""
        self.expected_total = total
        if self.received >= total and not self.done.called:
            self.done.callback(None)

    def summary(self) -> dict[str, Any]:
        return {
            "received": self.received,
            "out_of_order": self.out_of_order,
            "duplicates": self.duplicates,
            "redelivered": self.redelivered,
            "first": self.first,
            "last": self.last,
        }


class _Expect(LineReceiver):
    """Reads ``sent N`` from the parent on standard input."""

    delimiter = b"\n"

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    def lineReceived(self, line: bytes) -> None:
        word, _, number = line.decode().partition(" ")
        if word == "sent":
            self.consumer.expect(int(number))


def _failed(failure: Failure) -> None:
    """Tell the parent why, then end the process."""
    emit("error", message=f"{type(failure.value).__name__}: {failure.value}")
    if reactor.running:
        reactor.stop()


async def produce(args: argparse.Namespace) -> None:
    client = await connect(reactor, args.url, confirmation_window_size=args.window)
    emit("connected", idle_rss=current_rss())
    producer = Producer(client, args)
    cpu = cpu_seconds()
    producer.start()
    await producer.done
    emit("done", **producer.summary(), cpu=cpu_seconds() - cpu, peak_rss=peak_rss())
    await client.close()


async def consume(args: argparse.Namespace) -> None:
    consumer = Consumer(args.count, args.ack_every)
    stdio.StandardIO(_Expect(consumer))
    client = await connect(reactor, args.url)
    await client.consumer(args.queue, window_size=args.window, on_message=consumer.on_message)
    cpu = cpu_seconds()
    emit("ready", idle_rss=current_rss())
    last = await consumer.done
    if last is not None:
        await last.ack_durably(cumulative=True)
    emit("received", **consumer.summary(), cpu=cpu_seconds() - cpu, peak_rss=peak_rss())
    await client.close()


def run(main: Any, args: argparse.Namespace) -> int:
    finished = Deferred.fromCoroutine(main(args))
    finished.addErrback(_failed)
    finished.addBoth(lambda _: reactor.stop())
    if not finished.called:
        reactor.run()
    return 0


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="python -m benchmarks.node_peers")
    roles = main.add_subparsers(dest="role", required=True)
    producer = roles.add_parser("producer")
    consumer = roles.add_parser("consumer")
    for sub in (producer, consumer):
        sub.add_argument("--url", required=True)
        sub.add_argument("--count", type=int, required=True)
    producer.add_argument("--address", default=QUEUE)
    producer.add_argument("--size", type=int, default=1024, help="body bytes")
    producer.add_argument("--durable", action="store_true")
    producer.add_argument("--seconds", type=float, default=60.0, help="stop sending after")
    producer.add_argument(
        "--window", type=int, default=1024 * 1024, help="confirmation-window-size (bytes)"
    )
    producer.add_argument(
        "--sample-every", type=int, default=1, help="time every Nth send's confirmation"
    )
    consumer.add_argument("--queue", default=QUEUE)
    consumer.add_argument("--ack-every", type=int, default=500, help="cumulative ack period")
    consumer.add_argument(
        "--window", type=int, default=1024 * 1024, help="consumer-window-size (bytes)"
    )
    return main


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    tune_allocator()
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    return run(produce if args.role == "producer" else consume, args)


if __name__ == "__main__":
    sys.exit(main())
