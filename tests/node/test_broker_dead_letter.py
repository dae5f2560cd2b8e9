"""Dead letters, as Artemis keeps them: a message handed out ``max-delivery-attempts``
times and given back (a NACK, a closing consumer, a rolled-back acknowledgement) goes to
its address's ``dead-letter-address`` with headers naming where it came from, as does a
NACK without requeue; without a dead-letter address it is dropped and counted. A durable
one moves in one store transaction, so a restart finds it in exactly one place."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.logger import globalLogPublisher

from bridge.node.broker import ORIGINAL_ADDRESS, ORIGINAL_QUEUE
from bridge.node.queue import Delivery
from tests.node.test_broker import brokers, config, take  # noqa: F401 (the fixture)

DEAD_LETTERS = {
    "address-setting": [
        {"match": "orders", "max-delivery-attempts": 2, "dead-letter-address": "DLQ"},
        {"match": "plain", "max-delivery-attempts": 2},
        {"match": "endless", "max-delivery-attempts": -1, "dead-letter-address": "DLQ"},
    ]
}


@pytest_twisted.ensureDeferred
async def test_a_message_delivered_too_often_goes_to_the_dead_letter_address(brokers):  # noqa: F811
    broker = await brokers(**DEAD_LETTERS)
    await broker.send("orders", b"poison", {"kind": "bad"}, durable=True)
    await broker.send("orders", b"fine", durable=True)
    deliveries = take(broker, "orders")
    assert [d.message.body for d in deliveries] == [b"poison", b"fine"]
    await broker.nack("orders", 1, deliveries[0].delivery_id, requeue=True)  # count 1: back
    again = deliveries[-1]
    assert (again.message.body, again.delivery_count) == (b"poison", 2)
    await broker.nack("orders", 1, again.delivery_id, requeue=True)  # count 2: the limit
    orders = broker.queue("orders")
    assert orders.depth == 1 and orders.in_flight == 1  # only "fine", in flight
    [dead] = broker.queue("DLQ").browse()
    assert dead.message.body == b"poison" and dead.message.durable
    assert dead.message.address == "DLQ" and dead.delivery_count == 0
    assert dead.message.headers == {
        "kind": "bad",
        ORIGINAL_ADDRESS: "orders",
        ORIGINAL_QUEUE: "orders",
    }
    await broker.acknowledge("orders", 1, deliveries[1].delivery_id)
    broker = await brokers.restart(broker)
    assert broker.queue("orders").depth == 0
    assert [e.message.body for e in broker.queue("DLQ").browse()] == [b"poison"]


@pytest_twisted.ensureDeferred
async def test_a_closing_consumer_or_a_rollback_sends_exhausted_messages_on(brokers):  # noqa: F811
    broker = await brokers(**DEAD_LETTERS)
    for body in (b"a", b"b"):
        await broker.send("orders", body, durable=True)
    first = take(broker, "orders", 1)
    await broker.close_consumer("orders", 1)  # both delivered once, back
    second = take(broker, "orders", 2)
    assert [d.delivery_count for d in second] == [2, 2]
    tx = broker.begin()
    await broker.acknowledge("orders", 2, second[0].delivery_id, tx=tx)
    await broker.rollback(tx)  # "a": its second delivery given back
    await broker.close_consumer("orders", 2)  # "b" too
    assert len(first) == 2 and broker.queue("orders").depth == 0
    assert sorted(e.message.body for e in broker.queue("DLQ").browse()) == [b"a", b"b"]
    broker = await brokers.restart(broker)
    assert broker.queue("orders").depth == 0
    assert broker.queue("DLQ").depth == 2


@pytest_twisted.ensureDeferred
async def test_a_nack_without_requeue_goes_to_the_dead_letter_address(brokers):  # noqa: F811
    broker = await brokers(**DEAD_LETTERS)
    await broker.send("orders", b"refused", durable=False)
    [delivery] = take(broker, "orders")
    await broker.nack("orders", 1, delivery.delivery_id, requeue=False)
    [dead] = broker.queue("DLQ").browse()
    assert dead.message.body == b"refused" and not dead.message.durable


@pytest_twisted.ensureDeferred
async def test_without_a_dead_letter_address_they_are_dropped_counted_and_logged_once(
    brokers,  # noqa: F811
):
    broker = await brokers(**DEAD_LETTERS)
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    try:
        for n in range(3):
            await broker.send("plain", str(n).encode(), durable=True)
        deliveries: list[Delivery] = take(broker, "plain")
        for _ in range(2):
            for delivery in list(deliveries[-3:]):
                await broker.nack("plain", 1, delivery.delivery_id, requeue=True)
    finally:
        globalLogPublisher.removeObserver(events.append)
    queue = broker.queue("plain")
    assert queue.depth == 0 and queue.dropped_total == 3
    dropped = [e for e in events if "over max-delivery-attempts" in e.get("log_format", "")]
    assert len(dropped) == 1 and dropped[0]["why"] == "it has no dead-letter-address"
    broker = await brokers.restart(broker)
    assert broker.queue("plain").depth == 0


@pytest_twisted.ensureDeferred
async def test_unlimited_attempts_redeliver_for_ever_and_the_default_is_ten(brokers):  # noqa: F811
    broker = await brokers(**DEAD_LETTERS)
    assert broker.addresses["orders"].settings.max_delivery_attempts == 2
    assert broker.config.settings_for("elsewhere").max_delivery_attempts == 10
    await broker.send("endless", b"again", durable=True)
    deliveries = take(broker, "endless")
    for _ in range(15):
        await broker.nack("endless", 1, deliveries[-1].delivery_id, requeue=True)
    assert deliveries[-1].delivery_count == 16
    assert "DLQ" not in broker.queues


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ({"max-delivery-attempts": 0}, "at least 1, or -1 for no limit, got 0"),
        ({"max-delivery-attempts": "many"}, "at least 1, or -1 for no limit, got 'many'"),
        ({"dead-letter-address": "no spaces"}, "expected a name of letters"),
        ({"dead-letter-address": 5}, "expected a string"),
    ],
)
def test_bad_dead_letter_settings_name_the_file_and_key(tmp_path, setting, expected):
    from security.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        config(tmp_path, **{"address-setting": [{"match": "orders", **setting}]})
    (key,) = setting
    message = str(caught.value)
    assert "node.toml" in message and f"address-setting[0].{key}" in message
    assert expected in message


def test_a_more_specific_setting_may_take_the_dead_letter_address_away(tmp_path):
    cfg = config(
        tmp_path,
        **{
            "address-setting": [
                {"match": "#", "dead-letter-address": "DLQ"},
                {"match": "orders", "dead-letter-address": ""},
            ]
        },
    )
    assert cfg.settings_for("other").dead_letter_address == "DLQ"
    assert cfg.settings_for("orders").dead_letter_address == ""


@pytest_twisted.ensureDeferred
async def test_a_bridge_giving_back_or_the_node_stopping_makes_no_dead_letters(brokers):  # noqa: F811
    broker = await brokers(**DEAD_LETTERS)
    await broker.send("orders", b"retried", durable=True)
    for consumer_id in range(1, 5):  # a bridge whose target refuses, four times
        [delivery] = take(broker, "orders", consumer_id)
        await broker.close_consumer("orders", consumer_id, dead_letters=False)
    assert delivery.delivery_count == 4 and "DLQ" not in broker.queues
    take(broker, "orders", 9)
    broker = await brokers.restart(broker)  # the node stops with it in flight
    [entry] = broker.queue("orders").browse()
    assert entry.delivery_count == 5 and "DLQ" not in broker.queues
