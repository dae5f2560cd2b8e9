"""Large bodies streamed through the store (``bridge.node.bodies``), as both heads use
them: written a chunk at a time and handed over whole, or dropped; read back a chunk at
a time, with a short file named as what went wrong."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import pytest_twisted

from bridge.node.bodies import CHUNK_SIZE, BodySink, BodySource
from bridge.node.broker import Broker
from tests.node.test_broker import Brokers, brokers

__all__ = ["brokers"]


def sink_of(broker: Broker, data: bytes, piece: int) -> BodySink:
    sink = BodySink(broker, broker.allocate_id(), len(data))
    for start in range(0, len(data), piece):
        sink.write(data[start : start + piece])
    return sink


@pytest_twisted.ensureDeferred
async def test_a_body_written_in_pieces_is_read_back_in_chunks(brokers: Brokers) -> None:
    broker = await brokers()
    data = os.urandom(2 * CHUNK_SIZE + 1000)
    sink = sink_of(broker, data, 70_000)
    assert sink.received == len(data)
    body = sink.finish()
    assert body.size == len(data)
    source = BodySource(broker, body)
    chunks = []
    while source.remaining:
        chunks.append(source.read())
    source.close()
    assert [len(chunk) for chunk in chunks] == [CHUNK_SIZE, CHUNK_SIZE, 1000]
    assert b"".join(chunks) == data


@pytest_twisted.ensureDeferred
async def test_a_discarded_body_leaves_nothing_behind(brokers: Brokers) -> None:
    broker = await brokers()
    sink = sink_of(broker, b"x" * 5000, 1000)
    where = Path(sink.name)
    assert where.exists()
    sink.discard()
    sink.discard()  # a second time: nothing more to drop
    assert not where.exists()


@pytest_twisted.ensureDeferred
async def test_a_body_file_that_ends_early_is_an_error_naming_it(brokers: Brokers) -> None:
    broker = await brokers()
    body = sink_of(broker, b"y" * (CHUNK_SIZE + 10), CHUNK_SIZE).finish()
    with open(body.path, "r+b") as file:
        file.truncate(CHUNK_SIZE)
    source = BodySource(broker, body)
    assert len(source.read()) == CHUNK_SIZE
    with pytest.raises(OSError, match="is short"):
        source.read()
    source.close()
