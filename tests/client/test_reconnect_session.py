"""After a reconnection (sans-IO): login again, consumers created again, unconfirmed sends
resent in order with new sequences, requests in flight failed as of unknown outcome."""

from __future__ import annotations

import io

import pytest

from bridge.client.errors import ConnectionLost, StaleDelivery
from bridge.client.events import ConsumerLost, Ready
from bridge.protocol import (
    ClusterConnect,
    Connected,
    CreateConsumer,
    CreateQueue,
    Deliver,
    ErrorCode,
    Failed,
    Ok,
    Routing,
    Send,
    SendConfirmed,
    SendLargeBegin,
    SendLargeChunk,
)
from tests.client.sansio import Outcomes, message, ready


def test_unconfirmed_sends_are_resent_in_order_on_the_next_connection():
    driver = ready()
    outcomes = Outcomes()
    for n in range(4):
        driver.session.send(
            message(body=b"%d" % n, duplicate_id=b"d%d" % n), callback=outcomes(str(n))
        )
    driver.sent()
    driver.feed(SendConfirmed(1))
    driver.session.connection_lost()
    assert driver.events() == []
    assert not driver.session.is_writable
    driver.session.send(message(body=b"later"))
    driver.session.connection_made()
    assert [type(p) for p in driver.sent()] == [ClusterConnect]
    [event] = [e for e in driver.feed(Connected("n", "i", 1, -1)) if isinstance(e, Ready)]
    assert event.reconnected
    resent = driver.sent()
    assert [(p.sequence, p.message.body) for p in resent] == [
        (1, b"1"),
        (2, b"2"),
        (3, b"3"),
        (4, b"later"),
    ]
    assert [p.message.duplicate_id for p in resent[:3]] == [b"d1", b"d2", b"d3"]
    driver.feed(SendConfirmed(4))
    assert list(outcomes.heard) == ["0", "1", "2", "3"]


def test_a_large_send_is_read_again_from_its_start():
    driver = ready(chunk_size=4)
    driver.session.send(message(body=b""), body_file=io.BytesIO(b"abcdefgh"))
    driver.all_sent()
    driver.session.connection_lost()
    driver.session.connection_made()
    driver.sent()
    driver.feed(Connected("n", "i", 1, -1))
    assert driver.all_sent() == [
        SendLargeBegin(1, None, message(body=b""), 8),
        SendLargeChunk(1, b"abcd", False),
        SendLargeChunk(1, b"efgh", True),
    ]


def test_consumers_are_created_again_and_old_messages_are_stale():
    driver = ready()
    consumer = driver.session.open_consumer("orders", window_size=500)
    driver.sent()
    driver.feed(Ok(1))
    [old] = driver.feed(Deliver(consumer, 1, 1, message()))
    driver.session.connection_lost()
    with pytest.raises(StaleDelivery, match="earlier connection"):
        driver.session.ack(old)
    driver.session.connection_made()
    driver.sent()
    driver.feed(Connected("n", "i", 1, -1))
    assert driver.sent() == [CreateConsumer(2, consumer, "orders", None, False, 500)]
    driver.feed(Ok(2))
    [again] = driver.feed(Deliver(consumer, 1, 2, message()))
    driver.session.ack(again)


def test_a_consumer_the_node_refuses_after_a_reconnection_is_reported_lost():
    driver = ready()
    consumer = driver.session.open_consumer("orders")
    driver.sent()
    driver.feed(Ok(1))
    driver.session.connection_lost()
    driver.session.connection_made()
    driver.sent()
    driver.feed(Connected("n", "i", 1, -1))
    driver.sent()
    [lost] = driver.feed(Failed(2, ErrorCode.NOT_FOUND, "no queue 'orders'"))
    assert isinstance(lost, ConsumerLost) and lost.consumer_id == consumer


def test_requests_in_flight_fail_and_requests_made_while_away_wait():
    driver = ready()
    outcomes = Outcomes()
    driver.session.create_queue(
        "a", "a", routing=Routing.ANYCAST, durable=True, filter=None, callback=outcomes("a")
    )
    driver.sent()
    driver.session.connection_lost()
    driver.session.create_queue(
        "b", "b", routing=Routing.MULTICAST, durable=False, filter="x > 1", callback=outcomes("b")
    )
    driver.events()
    error = outcomes.heard["a"]
    assert isinstance(error, ConnectionLost)
    assert "create queue 'a' on address 'a'" in str(error)
    assert "outcome is unknown" in str(error)
    driver.session.connection_made()
    driver.sent()
    driver.feed(Connected("n", "i", 1, -1))
    assert driver.sent() == [CreateQueue(2, "b", "b", Routing.MULTICAST, False, "x > 1")]
    driver.feed(Ok(2))
    assert outcomes.heard["b"] is None


def test_resends_keep_to_the_new_window():
    one = message().size
    driver = ready(confirmation_window_size=one)
    driver.session.send(message())
    driver.sent()
    driver.session.send(message())
    driver.session.connection_lost()
    driver.session.connection_made()
    driver.sent()
    driver.feed(Connected("n", "i", 1, -1))
    assert [type(p) for p in driver.sent()] == [Send]
    driver.feed(SendConfirmed(1))
    assert [p.sequence for p in driver.sent()] == [2]
