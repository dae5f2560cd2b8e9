"""Large messages through a bridge to a target whose consumer reads slowly (issue 6):
50 MiB durable messages sent to A, forwarded by A's bridge to B, and read from B through a
proxy that reads at 50 MB/s. The source node's resident memory stays within a bound that
depends neither on the message size nor on the backlog (the messages wait on A's disk or
B's, never in A's memory), and every body arrives whole.

The issue's size: 1 GiB of 50 MiB messages, here 21 of them (1,050 MiB), about 22 s of
reading at 50 MB/s. The backlog builds: the producer finishes long before the consumer."""

from __future__ import annotations

import time

import pytest
import pytest_twisted
from twisted.internet import reactor

from bridge.client.api import connect
from tests.system.bridges import (
    MIB,
    Proxy,
    bridge_table,
    wait_bridge,
    wait_queue_empty,
)
from tests.system.flow import PatternFile, RssSampler, check_pattern
from tests.system.nodes import node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(360)]

SIZE = 50 * MIB
COUNT = 21
READ_RATE = 50e6
"""Bytes per second the consumer on B reads."""
SOURCE_GROWTH = 60 * MIB
"""What A's RSS may grow by, whatever the size of the messages or of the backlog."""


@pytest_twisted.ensureDeferred
async def test_large_messages_to_a_slow_consumer_keep_the_source_small(nodes):
    b = await nodes(node_document("b", address=[{"name": "large"}]), name="b").wait_started()
    a_document = node_document(
        "a",
        address=[{"name": "large"}],
        bridge=[bridge_table("a-to-b", "large", b.core_url)],
    )
    a = await nodes(a_document, name="a").wait_started()
    slow = Proxy(b.ports["core"], read_rate=READ_RATE).listen()
    sampler = RssSampler({"a": a.pid or 0, "b": b.pid or 0}).start()
    producer = await connect(reactor, a.core_url)
    reader = await connect(reactor, slow.url)
    try:
        consumer = await reader.consumer("large")
        started = time.monotonic()
        sending = [
            producer.send("large", PatternFile(SIZE), {"number": number}) for number in range(COUNT)
        ]
        for number in range(COUNT):
            message = await consumer.receive().addTimeout(120, reactor)
            assert message.is_large and message.headers["number"] == number, message.headers
            check_pattern(message.body_file, SIZE)
            await message.ack_durably().addTimeout(30, reactor)
            if number == 0:
                sent_by_first = sum(1 for each in sending if each.called)
        elapsed = time.monotonic() - started
        for each in sending:
            await each.addTimeout(30, reactor)
        await wait_queue_empty(a, "large")
        entry = await wait_bridge(
            a, "a-to-b", lambda e: e["messages_forwarded"] == COUNT, "counts the messages"
        )
        sampler.stop()
    finally:
        sampler.stop()
        for client in (producer, reader):
            await client.close()
        await slow.close()

    total = COUNT * SIZE
    print(
        f"\n{COUNT} x {SIZE // MIB} MiB through the bridge to a {READ_RATE / 1e6:.0f} MB/s "
        f"reader: {elapsed:.1f} s ({total / elapsed / 1e6:.0f} MB/s); {sampler.describe()}; "
        f"{sent_by_first} sends confirmed when the first arrived; bridge {entry}"
    )
    assert entry["bytes_forwarded"] >= total, entry
    assert sampler.growth("a") < SOURCE_GROWTH, sampler.describe()
    await wait_queue_empty(b, "large")
