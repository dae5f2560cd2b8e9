"""A connection's local transactions by its client's names (``bridge.node.local``): one
open per name, effects held for the commit, and what is still open handed back when the
connection goes."""

from __future__ import annotations

import pytest_twisted

from bridge.message import Message
from bridge.node.local import LocalTransaction, LocalTransactions
from tests.node.test_broker import Brokers, brokers

__all__ = ["brokers"]


@pytest_twisted.ensureDeferred
async def test_one_transaction_per_name_and_effects_wait_for_the_commit(
    brokers: Brokers,
) -> None:
    broker = await brokers()
    transactions: LocalTransactions[str, LocalTransaction] = LocalTransactions(
        broker, LocalTransaction
    )
    assert transactions.begin("t1")
    assert not transactions.begin("t1")
    local = transactions.get("t1")
    assert local is not None
    broker.publish(Message(0, "orders", False, {}, b"in t1"), tx=local.tx)
    effects: list[str] = []
    local.at_commit.append(lambda: effects.append("nack"))
    assert broker.queue("orders").waiting == 0
    assert transactions.end("t1") is local
    assert transactions.get("t1") is None
    await transactions.commit(local)
    assert effects == ["nack"]
    assert broker.queue("orders").waiting == 1


@pytest_twisted.ensureDeferred
async def test_closing_hands_back_the_open_ones_to_roll_back(brokers: Brokers) -> None:
    broker = await brokers()
    transactions: LocalTransactions[int, LocalTransaction] = LocalTransactions(
        broker, LocalTransaction
    )
    transactions.begin(1)
    transactions.begin(2)
    local = transactions.get(1)
    assert local is not None
    broker.publish(Message(0, "orders", False, {}, b"never"), tx=local.tx)
    open_ones = transactions.close()
    assert len(open_ones) == 2
    assert transactions.get(1) is None
    for each in open_ones:
        await transactions.rollback(each)
    assert broker.queue("orders").waiting == 0
