"""The large-message producer and consumer roles, shared by the large-message benchmark
(``python -m benchmarks.node_large producer|consumer``) and the bridge benchmark
(``python -m benchmarks.bridge_throughput large-producer|large-consumer``), so that both
measure the same client code.

The producer writes one body file of ``--size`` random bytes and sends it as a file object
per message (it streams as SEND_LARGE_BEGIN and chunks, never whole in memory), keeping to
``Client.address_writable``; each send carries headers ``seq`` and ``t`` (its send time,
``time.monotonic_ns``, one clock for every process). The consumer receives each into its
spool file, checks its sequence and size (and with ``--verify`` its CRC-32), times it from
``t`` and acknowledges it. Both report JSON event lines (``benchmarks.peers.emit``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import zlib
from functools import partial
from typing import IO

from twisted.internet import reactor, stdio
from twisted.internet.defer import Deferred

from benchmarks.node_peers import _Expect, cpu_seconds, percentile
from benchmarks.peers import current_rss, emit, peak_rss
from bridge.client.api import ReceivedMessage, connect
from bridge.client.errors import ClientError

MIB = 1024 * 1024
QUEUE = "bench"
READ = MIB


def body_file(folder: str, size: int) -> tuple[str, int]:
    """A file of ``size`` random bytes to send as every message's body; its CRC-32."""
    path = os.path.join(folder, "body")
    crc = 0
    with open(path, "wb") as body:
        for start in range(0, size, READ):
            data = os.urandom(min(READ, size - start))
            crc = zlib.crc32(data, crc)
            body.write(data)
    return path, crc


def latency_summary(latencies_ns: list[int]) -> dict[str, float]:
    """End-to-end latency percentiles, in milliseconds, of the samples (in ns)."""
    ordered = sorted(latency / 1e6 for latency in latencies_ns)
    return {
        "latency_samples": len(ordered),
        "e2e_p50_ms": percentile(ordered, 0.50),
        "e2e_p99_ms": percentile(ordered, 0.99),
        "e2e_max_ms": ordered[-1] if ordered else 0.0,
    }


class Outcome:
    """The producer's sends as they are settled; ``done`` fires once all ``count`` are."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.confirmed = 0
        self.refused = 0
        self.first_error: str | None = None
        self.done: Deferred[None] = Deferred()

    def settled(self, body: IO[bytes], error: ClientError | None) -> None:
        body.close()
        if error is None:
            self.confirmed += 1
        else:
            self.refused += 1
            self.first_error = self.first_error or str(error)
        if self.confirmed + self.refused == self.count:
            self.done.callback(None)


async def produce_large(args: argparse.Namespace) -> None:
    """Send ``count`` messages, each the body file opened anew, while the address is
    writable; report once every send is settled."""
    client = await connect(reactor, args.url)
    with tempfile.TemporaryDirectory(prefix="txbridge-large-producer-") as folder:
        path, crc = body_file(folder, args.size)
        emit("connected", idle_rss=current_rss(), crc=crc)
        outcome = Outcome(args.count)
        cpu = cpu_seconds()
        first_send = time.monotonic()
        for sequence in range(args.count):
            if not client.address_writable(QUEUE):
                await client.when_writable(QUEUE)
            body = open(path, "rb")  # noqa: SIM115 - open until its send is settled
            client.send_nowait(
                QUEUE,
                body,
                {"seq": sequence, "t": time.monotonic_ns()},
                durable=args.durable,
                on_settled=partial(outcome.settled, body),
            )
        await outcome.done
        emit(
            "done",
            sent=args.count,
            confirmed=outcome.confirmed,
            refused=outcome.refused,
            first_error=outcome.first_error,
            first_send=first_send,
            last_confirm=time.monotonic(),
            cpu=cpu_seconds() - cpu,
            peak_rss=peak_rss(),
        )
    await client.close()


class LargeConsumer:
    """Checks each large message's sequence and size (and CRC), times it from its send,
    then acknowledges it."""

    def __init__(self, count: int, size: int, verify: bool) -> None:
        self.expected_total = count
        self.size = size
        self.verify = verify
        self.received = 0
        self.bytes = 0
        self.out_of_order = 0
        self.wrong_size = 0
        self.crcs: set[int] = set()
        self.latencies: list[int] = []
        self.first = 0.0
        self.last = 0.0
        self.done: Deferred[None] = Deferred()

    def on_message(self, message: ReceivedMessage) -> None:
        now = time.monotonic()
        sent = message.headers.get("t")
        if isinstance(sent, int):
            self.latencies.append(time.monotonic_ns() - sent)
        self.first = self.first or now
        self.last = now
        body = message.body_file
        size = body.seek(0, os.SEEK_END)
        if self.verify:
            body.seek(0)
            crc = 0
            while data := body.read(READ):
                crc = zlib.crc32(data, crc)
            self.crcs.add(crc)
        body.close()
        if message.headers.get("seq") != self.received:
            self.out_of_order += 1
        if size != self.size:
            self.wrong_size += 1
        self.received += 1
        self.bytes += size
        message.ack()
        self.expect(self.expected_total)

    def expect(self, total: int) -> None:
        self.expected_total = total
        if self.received >= total and not self.done.called:
            self.done.callback(None)


async def consume_large(args: argparse.Namespace) -> None:
    """Consume until the parent says how many were sent (``sent N``) and all are here."""
    consumer = LargeConsumer(args.count, args.size, args.verify)
    stdio.StandardIO(_Expect(consumer))  # type: ignore[arg-type]
    client = await connect(reactor, args.url)
    await client.consumer(QUEUE, window_size=args.window, on_message=consumer.on_message)
    cpu = cpu_seconds()
    emit("ready", idle_rss=current_rss())
    await consumer.done
    emit(
        "received",
        received=consumer.received,
        bytes=consumer.bytes,
        out_of_order=consumer.out_of_order,
        wrong_size=consumer.wrong_size,
        crcs=sorted(consumer.crcs),
        first=consumer.first,
        last=consumer.last,
        **latency_summary(consumer.latencies),
        cpu=cpu_seconds() - cpu,
        peak_rss=peak_rss(),
    )
    await client.close()


def large_role_arguments(parser: argparse.ArgumentParser, producer: bool) -> None:
    """The options of the large producer (``producer``) or consumer role."""
    parser.add_argument("--url", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--size", type=int, required=True, help="body bytes")
    if producer:
        parser.add_argument("--durable", action="store_true")
    else:
        parser.add_argument("--verify", action="store_true", help="CRC-32")
        parser.add_argument("--window", type=int, default=MIB, help="consumer window, bytes")
