"""Deliveries held across a reconnection (sans-IO): a consumer created again on a node of
protocol 5 claims the messages the application took and has not settled; the claimed ones
are acknowledged through the application's own copies, the others are stale."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.client.errors import StaleDelivery, TransactionRolledBack
from bridge.client.events import ConsumerLost, Delivery
from bridge.protocol import (
    CLAIM_LIMIT,
    Ack,
    ClaimedDelivery,
    Connected,
    ConsumerCredits,
    CreateConsumer,
    Deliver,
    ErrorCode,
    Failed,
    Nack,
    Ok,
    ReattachConsumer,
    Reattached,
)
from tests.client.sansio import Driver, Outcomes, message, ready

WINDOW = 10_000


def holding(count: int, taken: int) -> tuple[Driver, int, list[Delivery]]:
    """A consumer delivered messages 1..``count``, of which the application took the first
    ``taken``; then the connection dropped."""
    driver = ready()
    consumer = driver.session.open_consumer("orders", window_size=WINDOW)
    driver.sent()
    driver.feed(Ok(1))
    deliveries = []
    for n in range(1, count + 1):
        [delivery] = driver.feed(Deliver(consumer, n, 1, message(id=100 + n)))
        assert isinstance(delivery, Delivery)
        deliveries.append(delivery)
    for delivery in deliveries[:taken]:
        driver.session.released(delivery)
    driver.sent()
    driver.session.connection_lost()
    return driver, consumer, deliveries


def reconnect(driver: Driver, version: int = 5) -> list[object]:
    driver.session.connection_made()
    driver.sent()
    driver.feed(Connected("node-b", "id-b", version, -1))
    return list(driver.sent())


def test_held_messages_are_claimed_and_acknowledged_under_their_new_ids():
    driver, consumer, [one, two, three] = holding(3, taken=2)
    assert reconnect(driver) == [
        ReattachConsumer(2, consumer, "orders", None, False, WINDOW, (101, 102))
    ]
    driver.feed(Reattached(2, (ClaimedDelivery(102, 1),), (101,)))
    # the application took the claimed one already: its credit comes back at once
    assert driver.sent() == [ConsumerCredits(consumer, two.cost)]
    driver.session.ack(two)
    assert driver.sent() == [Ack(consumer, 1, False, None, None)]
    with pytest.raises(StaleDelivery):
        driver.session.ack(one)  # not claimed: the node delivers it again
    with pytest.raises(StaleDelivery):
        driver.session.ack(three)  # never taken: dropped at the drop, delivered again
    [again] = driver.feed(Deliver(consumer, 2, 2, message(id=101)))
    driver.session.nack(again)
    assert driver.sent() == [Nack(consumer, 2, True)]


def test_acks_made_while_the_claim_is_unanswered_go_once_it_is():
    driver, consumer, [one, two] = holding(2, taken=2)
    outcomes = Outcomes()
    driver.session.ack(one, callback=outcomes("one"))  # disconnected: it waits
    assert reconnect(driver) == [
        ReattachConsumer(2, consumer, "orders", None, False, WINDOW, (101, 102))
    ]
    driver.session.ack(two, callback=outcomes("two"))  # claim unanswered: it waits too
    assert driver.sent() == []
    driver.feed(Reattached(2, (ClaimedDelivery(101, 1),), (102,)))
    assert driver.sent() == [
        ConsumerCredits(consumer, one.cost),
        Ack(consumer, 1, False, None, 3),
    ]
    assert isinstance(outcomes.heard["two"], StaleDelivery)
    driver.feed(Ok(3))
    assert outcomes.heard["one"] is None


def test_a_claimed_message_is_claimed_again_after_another_drop():
    driver, consumer, [one] = holding(1, taken=1)
    reconnect(driver)
    driver.feed(Reattached(2, (ClaimedDelivery(101, 1),), ()))
    driver.sent()
    driver.session.connection_lost()
    assert reconnect(driver) == [
        ReattachConsumer(3, consumer, "orders", None, False, WINDOW, (101,))
    ]
    driver.feed(Reattached(3, (ClaimedDelivery(101, 7),), ()))
    driver.sent()
    driver.session.ack(one, cumulative=True)
    assert driver.sent() == [Ack(consumer, 7, True, None, None)]


def test_if_the_node_refuses_the_consumer_again_its_held_messages_are_stale():
    driver, consumer, [one] = holding(1, taken=1)
    outcomes = Outcomes()
    driver.session.ack(one, callback=outcomes("one"))
    reconnect(driver)
    events = driver.feed(Failed(2, ErrorCode.NOT_FOUND, "no queue 'orders'"))
    assert [e.consumer_id for e in events if isinstance(e, ConsumerLost)] == [consumer]
    assert isinstance(outcomes.heard["one"], StaleDelivery)
    with pytest.raises(StaleDelivery):
        driver.session.nack(one)


def test_a_node_of_protocol_4_gets_a_plain_create_and_the_held_messages_are_stale():
    driver, consumer, [one] = holding(1, taken=1)
    outcomes = Outcomes()
    driver.session.ack(one, callback=outcomes("one"))
    assert reconnect(driver, version=4) == [
        CreateConsumer(2, consumer, "orders", None, False, WINDOW)
    ]
    assert isinstance(outcomes.heard["one"], StaleDelivery)


def test_what_was_acknowledged_in_a_transaction_is_not_claimed():
    driver = ready()
    consumer = driver.session.open_consumer("orders", window_size=WINDOW)
    driver.sent()
    driver.feed(Ok(1))
    tx_id = driver.session.begin(None)
    driver.sent()
    driver.feed(Ok(2))
    [held, acked] = [driver.feed(Deliver(consumer, n, 1, message(id=100 + n)))[0] for n in (1, 2)]
    for delivery in (held, acked):
        assert isinstance(delivery, Delivery)
        driver.session.released(delivery)
    driver.session.ack(acked, tx_id=tx_id)
    driver.sent()
    driver.session.connection_lost()
    assert reconnect(driver) == [
        ReattachConsumer(3, consumer, "orders", None, False, WINDOW, (101,))
    ]
    driver.feed(Reattached(3, (ClaimedDelivery(101, 1),), ()))
    with pytest.raises(StaleDelivery):
        driver.session.ack(acked)  # the node rolled its transaction back: it comes again
    with pytest.raises(TransactionRolledBack):
        driver.session.ack(held, tx_id=tx_id)  # the transaction is rollback-only


def test_a_claim_names_the_oldest_claim_limit_messages():
    driver, _, _ = holding(CLAIM_LIMIT + 2, taken=CLAIM_LIMIT + 2)
    [reattach] = reconnect(driver)
    assert isinstance(reattach, ReattachConsumer)
    assert reattach.claim == tuple(range(101, 101 + CLAIM_LIMIT))


@given(
    st.lists(st.sampled_from(["take", "keep", "ack"]), min_size=1, max_size=12),
    st.data(),
)
def test_every_held_message_is_either_acknowledgeable_or_stale(fates, data):
    """Whatever the application did before the drop and whichever the node claims, each
    message the application holds unsettled is claimed, and acknowledging it sends the
    delivery id the node gave it, or it is stale; nothing else is claimed."""
    driver = ready()
    consumer = driver.session.open_consumer("orders", window_size=-1)
    driver.sent()
    driver.feed(Ok(1))
    deliveries = []
    for n, fate in enumerate(fates, 1):
        [delivery] = driver.feed(Deliver(consumer, n, 1, message(id=100 + n)))
        assert isinstance(delivery, Delivery)
        deliveries.append(delivery)
        if fate != "keep":
            driver.session.released(delivery)
        if fate == "ack":
            driver.session.ack(delivery)
    driver.sent()
    driver.session.connection_lost()
    held = [d for d, fate in zip(deliveries, fates, strict=True) if fate == "take"]
    sent = reconnect(driver)
    if not held:
        assert sent == [CreateConsumer(2, consumer, "orders", None, False, -1)]
        return
    assert sent == [
        ReattachConsumer(2, consumer, "orders", None, False, -1, tuple(d.message.id for d in held))
    ]
    claimed = data.draw(st.lists(st.sampled_from(held), unique=True))
    given_ids = {d.message.id: 50 + i for i, d in enumerate(claimed)}
    driver.feed(
        Reattached(
            2,
            tuple(ClaimedDelivery(m, given_ids[m]) for m in given_ids),
            tuple(d.message.id for d in held if d.message.id not in given_ids),
        )
    )
    for delivery in held:
        if delivery.message.id in given_ids:
            driver.session.ack(delivery)
            assert driver.sent() == [
                Ack(consumer, given_ids[delivery.message.id], False, None, None)
            ]
        else:
            with pytest.raises(StaleDelivery):
                driver.session.ack(delivery)
