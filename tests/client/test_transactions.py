"""Transactions (sans-IO): begin, sends and acks with the tx id, commit and rollback in
order behind the transaction's waiting sends."""

from __future__ import annotations

import pytest

from bridge.client.errors import ConnectionLost, NotFound
from bridge.protocol import (
    Ack,
    Deliver,
    ErrorCode,
    Failed,
    Ok,
    Send,
    SendConfirmed,
    TxBegin,
    TxCommit,
    TxRollback,
)
from tests.client.sansio import Outcomes, message, ready


def test_sends_and_acks_carry_the_transaction_and_commit_is_answered():
    driver = ready()
    outcomes = Outcomes()
    consumer = driver.session.open_consumer("in")
    driver.sent()
    driver.feed(Ok(1))
    [delivery] = driver.feed(Deliver(consumer, 1, 1, message("in")))
    tx = driver.session.begin(outcomes("begin"))
    driver.session.send(message("out"), tx_id=tx, callback=outcomes("send"))
    driver.session.ack(delivery, tx_id=tx)
    driver.session.commit(tx, outcomes("commit"))
    assert driver.sent() == [
        TxBegin(2, tx),
        Send(1, tx, message("out")),
        Ack(consumer, 1, False, tx, None),
        TxCommit(3, tx),
    ]
    driver.feed(Ok(2), SendConfirmed(1), Ok(3))
    assert outcomes.heard == {"begin": None, "send": None, "commit": None}
    with pytest.raises(ConnectionLost, match=f"transaction {tx} is not open"):
        driver.session.send(message(), tx_id=tx)


def test_commit_waits_behind_the_transactions_waiting_sends():
    driver = ready(confirmation_window_size=1)
    tx = driver.session.begin(None)
    driver.session.send(message(), tx_id=tx)
    driver.session.send(message(), tx_id=tx)
    driver.session.commit(tx, None)
    assert [type(p) for p in driver.sent()] == [TxBegin, Send]
    driver.feed(Ok(1), SendConfirmed(1))
    assert [type(p) for p in driver.sent()] == [Send, TxCommit]


def test_rollback_and_a_failed_commit():
    driver = ready()
    outcomes = Outcomes()
    first = driver.session.begin(None)
    driver.session.rollback(first, outcomes("rollback"))
    second = driver.session.begin(None)
    driver.session.commit(second, outcomes("commit"))
    assert driver.sent() == [
        TxBegin(1, first),
        TxRollback(2, first),
        TxBegin(3, second),
        TxCommit(4, second),
    ]
    driver.feed(Ok(1), Ok(2), Ok(3), Failed(4, ErrorCode.NOT_FOUND, "no transaction 2"))
    assert outcomes.heard["rollback"] is None
    assert isinstance(outcomes.heard["commit"], NotFound)
    assert str(outcomes.heard["commit"]) == (
        "commit of transaction 2 refused (NOT_FOUND): no transaction 2"
    )


def test_a_lost_connection_rolls_the_transaction_back():
    driver = ready()
    outcomes = Outcomes()
    tx = driver.session.begin(None)
    driver.session.send(message(), tx_id=tx, callback=outcomes("send"))
    driver.sent()
    driver.feed(Ok(1))
    driver.session.connection_lost()
    driver.events()
    assert isinstance(outcomes.heard["send"], ConnectionLost)
    assert "rolled the transaction back" in str(outcomes.heard["send"])
    with pytest.raises(ConnectionLost, match="not open"):
        driver.session.commit(tx, None)
    driver.session.rollback(tx, outcomes("rollback"))  # already rolled back: fine
    driver.events()
    assert outcomes.heard["rollback"] is None
