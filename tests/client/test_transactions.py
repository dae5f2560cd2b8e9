"""Transactions (sans-IO): begin, sends and acks with the tx id, commit and rollback in
order behind the transaction's waiting sends."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.client.errors import ConnectionLost, NotFound, TransactionRolledBack
from bridge.client.transactions import Transactions
from bridge.protocol import (
    Ack,
    ClusterConnect,
    Connected,
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


def _reconnect(driver) -> list:
    """Drop the connection and log in again (to the same node or its backup): what the
    session sends once logged in."""
    driver.session.connection_lost()
    driver.session.connection_made()
    assert [type(p) for p in driver.sent()] == [ClusterConnect]
    driver.feed(Connected("node-b", "id-b", 1, -1))
    return driver.sent()


def test_a_used_transaction_is_rollback_only_after_a_lost_connection():
    driver = ready()
    outcomes = Outcomes()
    tx = driver.session.begin(None)
    driver.session.send(message(), tx_id=tx, callback=outcomes("send"))
    driver.sent()
    driver.feed(Ok(1))
    assert _reconnect(driver) == []  # nothing of it goes to the new connection
    assert isinstance(outcomes.heard["send"], TransactionRolledBack)
    with pytest.raises(TransactionRolledBack, match=f"transaction {tx} was rolled back"):
        driver.session.send(message(), tx_id=tx)
    driver.session.commit(tx, outcomes("commit"))
    driver.events()
    assert isinstance(outcomes.heard["commit"], TransactionRolledBack)
    assert driver.sent() == []
    # ended by the failed commit: a rollback now succeeds, a commit is refused at once
    driver.session.rollback(tx, outcomes("rollback"))
    driver.events()
    assert outcomes.heard["rollback"] is None
    with pytest.raises(ConnectionLost, match="not open"):
        driver.session.commit(tx, None)


def test_a_rollback_only_transactions_rollback_succeeds_and_a_new_one_works():
    driver = ready()
    outcomes = Outcomes()
    consumer = driver.session.open_consumer("in")
    driver.sent()
    driver.feed(Ok(1))
    [delivery] = driver.feed(Deliver(consumer, 1, 1, message("in")))
    tx = driver.session.begin(None)
    driver.session.ack(delivery, tx_id=tx)
    driver.sent()
    driver.feed(Ok(2))
    _reconnect(driver)
    driver.session.rollback(tx, outcomes("rollback"))
    driver.events()
    assert outcomes.heard["rollback"] is None
    again = driver.session.begin(outcomes("begin"))
    driver.session.send(message("out"), tx_id=again)
    driver.session.commit(again, outcomes("commit"))
    assert [type(p) for p in driver.sent()] == [TxBegin, Send, TxCommit]


def test_an_unused_transaction_is_begun_again_on_the_next_connection():
    driver = ready()
    outcomes = Outcomes()
    tx = driver.session.begin(outcomes("begin"))
    driver.sent()
    driver.feed(Ok(1))
    [again] = _reconnect(driver)
    assert again == TxBegin(2, tx)
    driver.feed(Ok(2))
    driver.session.send(message(), tx_id=tx)
    driver.session.commit(tx, outcomes("commit"))
    assert driver.sent() == [Send(1, tx, message()), TxCommit(3, tx)]
    driver.feed(SendConfirmed(1), Ok(3))
    assert outcomes.heard == {"begin": None, "commit": None}


def test_a_begin_unanswered_at_the_drop_fails_and_its_transaction_is_gone():
    driver = ready()
    outcomes = Outcomes()
    tx = driver.session.begin(outcomes("begin"))
    driver.sent()
    assert _reconnect(driver) == []
    assert isinstance(outcomes.heard["begin"], ConnectionLost)
    with pytest.raises(ConnectionLost, match=f"transaction {tx} is not open"):
        driver.session.send(message(), tx_id=tx)


def test_a_commit_waiting_at_the_drop_fails_as_rolled_back_one_sent_as_unknown():
    driver = ready(confirmation_window_size=1)
    outcomes = Outcomes()
    waiting = driver.session.begin(None)
    driver.session.send(message(), tx_id=waiting)
    driver.session.send(message(), tx_id=waiting)  # waits for the window
    driver.session.commit(waiting, outcomes("waiting"))  # waits behind it
    driver.sent()
    driver.feed(Ok(1))
    _reconnect(driver)
    assert isinstance(outcomes.heard["waiting"], TransactionRolledBack)

    sent = driver.session.begin(None)
    driver.session.commit(sent, outcomes("sent"))
    driver.sent()
    driver.feed(Ok(3))  # the begin (request 2 was the lost commit)
    _reconnect(driver)  # the commit's answer never came: it may have committed
    assert type(outcomes.heard["sent"]) is ConnectionLost
    assert "outcome is unknown" in str(outcomes.heard["sent"])


@given(
    st.lists(st.sampled_from(["begin", "begun", "use", "drop", "commit", "rollback"]), max_size=30)
)
def test_no_transaction_used_before_a_drop_ever_commits(steps: list[str]) -> None:
    """Whatever the order of begins, answers, sends, drops and ends, a transaction that
    sent or acknowledged something before a drop never reaches the node's commit, and one
    that did not is begun again exactly once per drop."""
    model = Transactions()
    opened: list[int] = []
    answered: set[int] = set()
    used_before_drop: set[int] = set()
    used: set[int] = set()
    committed: set[int] = set()
    for step in steps:
        live = [tx for tx in opened if tx in model]
        if step == "begin":
            tx = len(opened) + 1
            opened.append(tx)
            model.begun(tx)
        elif step == "begun" and live:
            answered.add(live[-1])
        elif step == "use" and live:
            model.use(live[-1])
            used.add(live[-1])
        elif step == "drop":
            model.lost({tx for tx in live if tx not in answered})
            used_before_drop |= used & set(live)
            again = model.begin_again()
            assert len(again) == len(set(again))
            assert not set(again) & used_before_drop
            answered -= set(again)
        elif step in ("commit", "rollback") and opened:
            tx = opened[-1]
            if tx in model:
                model.ended(tx)
                if step == "commit":
                    committed.add(tx)
            else:
                try:
                    model.outcome(tx, commit=step == "commit")
                except ConnectionLost:
                    assert step == "commit"
    assert not committed & used_before_drop
