"""Sends: sequences, the confirmation window, ranges confirmed, one send refused, and
producer credits per address (sans-IO)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.client.errors import AddressFull, NodeProtocolError, PermissionDenied
from bridge.client.events import SendsConfirmed
from bridge.message import MessageFormatError
from bridge.protocol import (
    ErrorCode,
    PacketFormatError,
    ProducerCredits,
    Send,
    SendConfirmed,
    SendFailed,
)
from tests.client.sansio import Outcomes, message, ready


def test_sends_are_pipelined_and_confirmed_in_one_range():
    driver = ready()
    outcomes = Outcomes()
    for n in range(3):
        driver.session.send(message(body=b"%d" % n), callback=outcomes(f"m{n}"))
    sent = driver.sent()
    assert [p.sequence for p in sent] == [1, 2, 3]
    assert all(isinstance(p, Send) and p.tx_id is None for p in sent)
    [event] = driver.feed(SendConfirmed(2))
    assert isinstance(event, SendsConfirmed) and len(event.callbacks) == 2
    assert outcomes.heard == {"m0": None, "m1": None}
    assert driver.session.unconfirmed == 1
    driver.feed(SendConfirmed(3))
    assert outcomes.heard["m2"] is None


def test_a_refused_send_fails_alone_with_the_nodes_words():
    driver = ready()
    outcomes = Outcomes()
    for name in ("a", "b"):
        driver.session.send(message(address=name), callback=outcomes(name))
    driver.sent()
    driver.feed(SendFailed(1, ErrorCode.PERMISSION_DENIED, "user alice lacks send on a"))
    driver.feed(SendConfirmed(2))
    error = outcomes.heard["a"]
    assert isinstance(error, PermissionDenied)
    assert error.code is ErrorCode.PERMISSION_DENIED
    assert str(error) == "send to 'a' refused (PERMISSION_DENIED): user alice lacks send on a"
    assert outcomes.heard["b"] is None


def test_the_confirmation_window_holds_sends_back_until_confirmations_come():
    one = message().size
    driver = ready(confirmation_window_size=2 * one)
    for _ in range(3):
        driver.session.send(message())
    assert len(driver.sent()) == 2
    assert not driver.session.is_writable
    driver.feed(SendConfirmed(1))
    [third] = driver.sent()
    assert third.sequence == 3
    assert not driver.session.is_writable  # 2 unconfirmed again
    driver.feed(SendConfirmed(3))
    assert driver.session.is_writable


def test_producer_credits_per_address():
    one = message(address="slow").size
    driver = ready(producer_window_size=one)
    driver.session.send(message(address="slow"))
    driver.session.send(message(address="slow"))
    driver.session.send(message(address="fast"))  # waits behind, in order
    assert len(driver.sent()) == 1
    assert not driver.session.address_writable("slow")
    assert not driver.session.is_writable
    driver.feed(ProducerCredits("slow", 1))
    assert [p.message.address for p in driver.sent()] == ["slow", "fast"]
    assert not driver.session.address_writable("slow")  # 1 - one: below zero
    assert driver.session.address_writable("elsewhere")


@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("send"), st.sampled_from(["slow", "fast"])),
            st.tuples(st.just("confirm"), st.just("")),
            st.tuples(st.just("credit"), st.sampled_from(["slow", "fast"])),
        ),
        max_size=30,
    ),
    credits=st.sampled_from([-1, 1, 2, 3]),
    window=st.integers(min_value=1, max_value=4),
)
def test_a_send_answers_whether_its_address_takes_another_at_once(steps, credits, window):
    """What ``send`` returns is ``address_writable`` asked right after it, whatever the
    windows, credits and confirmations before it."""
    one = message(address="slow").size
    grant = credits if credits == -1 else credits * one
    driver = ready(producer_window_size=grant, confirmation_window_size=window * one)
    for kind, address in steps:
        if kind == "send":
            answer = driver.session.send(message(address=address))
            assert answer == driver.session.address_writable(address)
        elif kind == "confirm":
            sequences = [p.sequence for p in driver.sent() if isinstance(p, Send)]
            if sequences:
                driver.feed(SendConfirmed(sequences[-1]))
        elif credits != -1:
            driver.feed(ProducerCredits(address, one))


def test_a_producer_window_below_the_nodes_grant_caps_the_credit():
    one = message(address="slow").size
    driver = ready(producer_window_size=64 * one, producer_window_size_cap=one)
    driver.session.send(message(address="slow"))
    driver.session.send(message(address="slow"))
    assert len(driver.sent()) == 1
    assert not driver.session.address_writable("slow")
    driver.feed(ProducerCredits("slow", one))
    assert len(driver.sent()) == 1


def test_a_producer_window_cap_does_not_apply_without_the_nodes_flow_control():
    driver = ready(producer_window_size=-1, producer_window_size_cap=1)
    for _ in range(3):
        driver.session.send(message(address="slow"))
    assert len(driver.sent()) == 3


def test_address_full_refusal_is_its_own_error():
    driver = ready()
    outcomes = Outcomes()
    driver.session.send(message(), callback=outcomes("m"))
    driver.sent()
    driver.feed(SendFailed(1, ErrorCode.ADDRESS_FULL, "address orders is full"))
    assert isinstance(outcomes.heard["m"], AddressFull)


def test_a_message_that_cannot_be_encoded_is_refused_at_once_and_nothing_is_sent():
    driver = ready()
    with pytest.raises(PacketFormatError, match="header"):
        driver.session.send(message(headers={"n": 1 << 70}))
    driver.session.send(message())
    assert [p.sequence for p in driver.sent()] == [1]


def test_a_waiting_message_that_cannot_be_encoded_is_refused_at_once():
    driver = ready(confirmation_window_size=1)
    driver.session.send(message())
    with pytest.raises((PacketFormatError, MessageFormatError)):
        driver.session.send(message(headers={"n": object()}))


@pytest.mark.parametrize(
    ("packet", "words"),
    [
        (SendConfirmed(5), "SEND_CONFIRMED up to 5 after 0, with sequences sent up to 2"),
        (SendFailed(9, ErrorCode.INVALID, "x"), "SEND_FAILED for sequence 9"),
    ],
)
def test_confirmations_of_sends_never_made_break_the_rules(packet, words):
    driver = ready()
    driver.session.send(message())
    driver.session.send(message())
    driver.sent()
    with pytest.raises(NodeProtocolError, match=words):
        driver.feed(packet)


def test_confirmations_never_go_back():
    driver = ready()
    driver.session.send(message())
    driver.session.send(message())
    driver.sent()
    driver.feed(SendConfirmed(2))
    with pytest.raises(NodeProtocolError, match="SEND_CONFIRMED up to 1 after 2"):
        driver.feed(SendConfirmed(1))


@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=40),
    window=st.integers(1, 2000),
    confirm_steps=st.lists(st.integers(0, 5), max_size=60),
)
def test_window_invariants_hold_whatever_the_node_confirms(sizes, window, confirm_steps):
    """Unconfirmed bytes before the last send stay below the window; every send is settled
    exactly once, in order, whatever ranges the node confirms."""
    driver = ready(confirmation_window_size=window)
    outcomes = Outcomes()
    for n, size in enumerate(sizes):
        driver.session.send(message(body=bytes(size)), callback=outcomes(str(n)))
    on_wire: list[Send] = []
    confirmed = 0
    steps = iter(confirm_steps)
    while True:
        new = driver.sent()
        on_wire += new
        unconfirmed = [p for p in on_wire if p.sequence > confirmed]
        if unconfirmed:
            before_last = sum(p.message.size for p in unconfirmed[:-1])
            assert before_last < window
        if confirmed == len(sizes):
            break
        step = next(steps, 5)
        confirmed = min(confirmed + step, len(on_wire))
        driver.feed(SendConfirmed(confirmed))
    assert list(outcomes.heard) == [str(n) for n in range(len(sizes))]
    assert [p.sequence for p in on_wire] == list(range(1, len(sizes) + 1))
