"""Large messages (sans-IO): sends streamed from a file in chunks as credits and the
connection allow, and deliveries spooled to a file with credits flowing back."""

from __future__ import annotations

import io

import pytest

from bridge.client.errors import NodeProtocolError
from bridge.client.events import Delivery
from bridge.protocol import (
    ConsumerCredits,
    DeliverLargeBegin,
    DeliverLargeChunk,
    Ok,
    ProducerCredits,
    Send,
    SendConfirmed,
    SendLargeBegin,
    SendLargeChunk,
)
from tests.client.sansio import Outcomes, message, ready


class CountingFile(io.BytesIO):
    """Remembers the largest read, to show the body is never read whole."""

    largest = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.largest = max(self.largest, len(data))
        return data


def test_a_file_body_goes_in_chunks_read_as_they_go():
    driver = ready(chunk_size=4)
    body = CountingFile(b"0123456789")
    outcomes = Outcomes()
    driver.session.send(message(body=b""), body_file=body, callback=outcomes("large"))
    driver.session.send(message(body=b"small"))
    assert not driver.session.is_writable  # streaming
    assert driver.sent(read_chunks=False) == [SendLargeBegin(1, None, message(body=b""), 10)]
    packets = driver.all_sent()
    assert packets == [
        SendLargeChunk(1, b"0123", False),
        SendLargeChunk(1, b"4567", False),
        SendLargeChunk(1, b"89", True),
        Send(2, None, message(body=b"small")),
    ]
    assert body.largest == 4
    driver.feed(SendConfirmed(2))
    assert outcomes.heard == {"large": None}


def test_bodies_from_min_large_message_size_go_large():
    driver = ready(min_large_message_size=8, chunk_size=100)
    driver.session.send(message(body=b"12345678"))
    assert driver.all_sent() == [
        SendLargeBegin(1, None, message(body=b""), 8),
        SendLargeChunk(1, b"12345678", True),
    ]


def test_chunks_wait_for_producer_credits():
    header = message(body=b"").size
    driver = ready(producer_window_size=header + 4, chunk_size=4)
    driver.session.send(message(body=b""), body_file=io.BytesIO(bytes(12)))
    assert [type(p) for p in driver.all_sent()] == [SendLargeBegin, SendLargeChunk]
    driver.feed(ProducerCredits("orders", 1))
    assert [p.data for p in driver.all_sent()] == [bytes(4)]
    driver.feed(ProducerCredits("orders", 100))
    assert [(len(p.data), p.last) for p in driver.all_sent()] == [(4, True)]


def test_a_streaming_send_cannot_be_confirmed_before_its_last_chunk():
    driver = ready(chunk_size=4)
    driver.session.send(message(body=b""), body_file=io.BytesIO(bytes(8)))
    driver.sent(read_chunks=False)
    with pytest.raises(NodeProtocolError, match="still streaming"):
        driver.feed(SendConfirmed(1))


def test_a_large_delivery_is_spooled_and_its_chunks_give_credit_back():
    driver = ready()
    consumer = driver.session.open_consumer("orders", window_size=10)
    driver.sent()
    driver.feed(Ok(1))
    header = message(body=b"", id=7)
    assert driver.feed(DeliverLargeBegin(consumer, 1, 2, header, 12)) == []
    assert driver.feed(DeliverLargeChunk(consumer, 1, b"abcdef", False)) == []
    assert driver.sent() == [ConsumerCredits(consumer, 6)]  # the chunk is in the file
    [delivery] = driver.feed(DeliverLargeChunk(consumer, 1, b"ghijkl", True))
    assert isinstance(delivery, Delivery)
    assert delivery.body_file is not None
    assert delivery.body_file.read() == b"abcdefghijkl"
    assert (delivery.message, delivery.delivery_count) == (header, 2)
    assert delivery.cost == header.size
    driver.session.ack(delivery)


def test_window_zero_keeps_a_large_body_flowing():
    driver = ready()
    consumer = driver.session.open_consumer("orders", window_size=0)
    driver.sent()
    driver.feed(Ok(1))
    driver.session.demand(consumer)
    driver.sent()
    header = message(body=b"")
    driver.feed(DeliverLargeBegin(consumer, 1, 1, header, 8))
    assert driver.sent() == [ConsumerCredits(consumer, header.size)]
    driver.feed(DeliverLargeChunk(consumer, 1, b"1234", False))
    assert driver.sent() == [ConsumerCredits(consumer, 4)]


@pytest.mark.parametrize(
    ("chunk", "words"),
    [
        (DeliverLargeChunk(1, 1, b"x" * 9, True), "a chunk of 9 bytes with 8 to come"),
        (DeliverLargeChunk(1, 1, b"x" * 8, False), "last=False"),
        (DeliverLargeChunk(1, 2, b"x", False), "no large delivery under way"),
    ],
)
def test_large_deliveries_that_break_the_rules(chunk, words):
    driver = ready()
    consumer = driver.session.open_consumer("orders")
    driver.sent()
    driver.feed(Ok(1))
    driver.feed(DeliverLargeBegin(consumer, 1, 1, message(body=b""), 8))
    with pytest.raises(NodeProtocolError, match=words):
        driver.feed(chunk)
