"""Consumers (sans-IO): creation, deliveries, credits granted back as the application takes
messages, acks (individual, cumulative, durable), nacks, browse-only, close."""

from __future__ import annotations

import pytest

from bridge.client.errors import NodeProtocolError, NotAcknowledgeable, NotFound, StaleDelivery
from bridge.client.events import Delivery
from bridge.protocol import (
    Ack,
    CloseConsumer,
    ConsumerCredits,
    CreateConsumer,
    Deliver,
    ErrorCode,
    Failed,
    Nack,
    Ok,
)
from tests.client.sansio import Driver, Outcomes, message, ready


def consuming(window_size: int = 1000, browse_only: bool = False) -> tuple[Driver, int]:
    driver = ready()
    consumer = driver.session.open_consumer(
        "orders", filter="colour = 'red'", window_size=window_size, browse_only=browse_only
    )
    [create] = driver.sent()
    assert create == CreateConsumer(
        1, consumer, "orders", "colour = 'red'", browse_only, window_size
    )
    driver.feed(Ok(1))
    return driver, consumer


def deliver(driver: Driver, consumer: int, delivery_id: int, body: bytes = b"x") -> Delivery:
    [event] = driver.feed(Deliver(consumer, delivery_id, 1, message(body=body, id=delivery_id)))
    assert isinstance(event, Delivery)
    return event


def test_a_consumer_the_node_refuses_is_gone():
    driver = ready()
    outcomes = Outcomes()
    driver.session.open_consumer("nope", callback=outcomes("create"))
    driver.sent()
    driver.feed(Failed(1, ErrorCode.NOT_FOUND, "no queue 'nope'"))
    error = outcomes.heard["create"]
    assert isinstance(error, NotFound)
    assert str(error) == "consumer on queue 'nope' refused (NOT_FOUND): no queue 'nope'"


def test_credits_go_back_in_grants_of_half_the_window_as_messages_are_taken():
    driver, consumer = consuming(window_size=1000)
    deliveries = [deliver(driver, consumer, n, bytes(200)) for n in range(1, 5)]
    assert driver.sent() == []  # nothing taken yet: no credit back
    driver.session.released(deliveries[0])
    driver.session.released(deliveries[1])
    assert driver.sent() == []  # below half the window
    driver.session.released(deliveries[2])
    cost = deliveries[0].cost
    assert driver.sent() == [ConsumerCredits(consumer, 3 * cost)]


def test_window_zero_lets_one_message_come_per_demand():
    driver, consumer = consuming(window_size=0)
    driver.session.demand(consumer)
    assert driver.sent() == [ConsumerCredits(consumer, 1)]
    driver.session.demand(consumer)
    assert driver.sent() == []  # the grant is still out
    taken = deliver(driver, consumer, 1, bytes(50))
    driver.session.released(taken)
    driver.session.demand(consumer)
    assert driver.sent() == [ConsumerCredits(consumer, taken.cost)]


def test_unlimited_window_grants_nothing():
    driver, consumer = consuming(window_size=-1)
    driver.session.released(deliver(driver, consumer, 1, bytes(5000)))
    assert driver.sent() == []


def test_acks_individual_cumulative_and_durable():
    driver, consumer = consuming()
    first, second, third, fourth = (deliver(driver, consumer, n) for n in (1, 2, 5, 9))
    driver.session.ack(second)
    driver.session.ack(third, cumulative=True)
    outcomes = Outcomes()
    driver.session.ack(fourth, callback=outcomes("durable"))
    assert driver.sent() == [
        Ack(consumer, 2, False, None, None),
        Ack(consumer, 5, True, None, None),
        Ack(consumer, 9, False, None, 2),
    ]
    driver.feed(Ok(2))
    assert outcomes.heard == {"durable": None}
    with pytest.raises(NotAcknowledgeable, match="already acknowledged"):
        driver.session.ack(first)  # settled by the cumulative ack


def test_nack_requeue_or_drop():
    driver, consumer = consuming()
    driver.session.nack(deliver(driver, consumer, 1))
    driver.session.nack(deliver(driver, consumer, 2), requeue=False)
    assert driver.sent() == [Nack(consumer, 1, True), Nack(consumer, 2, False)]


def test_browse_only_deliveries_cannot_be_settled():
    driver, consumer = consuming(browse_only=True)
    delivery = deliver(driver, consumer, 1)
    with pytest.raises(NotAcknowledgeable, match="browse-only consumer of queue 'orders'"):
        driver.session.ack(delivery)


def test_close_drops_later_deliveries_and_makes_held_messages_stale():
    driver, consumer = consuming()
    held = deliver(driver, consumer, 1)
    outcomes = Outcomes()
    driver.session.close_consumer(consumer, outcomes("close"))
    assert driver.sent() == [CloseConsumer(2, consumer)]
    assert driver.feed(Deliver(consumer, 2, 1, message())) == []  # raced the close
    with pytest.raises(StaleDelivery):
        driver.session.ack(held)
    driver.feed(Ok(2))
    assert outcomes.heard == {"close": None}
    with pytest.raises(NodeProtocolError, match="consumer 1, which is not open"):
        driver.feed(Deliver(consumer, 3, 1, message()))


@pytest.mark.parametrize(
    ("packet", "words"),
    [
        (Deliver(7, 1, 1, message()), "consumer 7, which is not open"),
        (Deliver(1, 1, 1, message()), "delivery ids must increase"),
    ],
)
def test_deliveries_that_break_the_rules(packet, words):
    driver, consumer = consuming()
    deliver(driver, consumer, 1)
    with pytest.raises(NodeProtocolError, match=words):
        driver.feed(packet)
