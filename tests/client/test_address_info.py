"""Address queries: sans-IO (QUERY_ADDRESS out, ADDRESS_INFO in, wrong answers refused,
asked again after a reconnection), then through the Twisted API against the real node."""

from __future__ import annotations

import pytest
import pytest_twisted

from bridge.client import AddressInfo
from bridge.client.errors import ClientClosed, NodeProtocolError, PermissionDenied
from bridge.client.events import Answered
from bridge.client.session import ClientSession
from bridge.protocol import (
    AddressFullPolicy,
    Connected,
    ErrorCode,
    Failed,
    Ok,
    QueryAddress,
    Routing,
)
from bridge.protocol import AddressInfo as AddressInfoPacket
from tests.client.sansio import Driver, Outcomes, ready
from tests.client.test_against_node import real
from tests.heads.conftest import SECURITY, Node
from tests.security.helpers import write_users

__all__ = ["real"]


def ask(driver: Driver, address: str, outcomes: Outcomes) -> list[AddressInfo]:
    """Query ``address``; the answers it gets are appended to the list returned."""
    answers: list[AddressInfo] = []
    driver.session.address_info(address, answer=answers.append, callback=outcomes(address))
    return answers


def feed_answers(driver: Driver, *packets: AddressInfoPacket | Ok | Failed) -> None:
    for event in driver.feed(*packets):
        if isinstance(event, Answered):
            event.callback(event.info)


def test_a_query_is_answered_with_the_address_info():
    driver = ready()
    outcomes = Outcomes()
    orders = ask(driver, "orders", outcomes)
    missing = ask(driver, "private.x", outcomes)
    assert driver.sent() == [QueryAddress(1, "orders"), QueryAddress(2, "private.x")]
    feed_answers(
        driver,
        AddressInfoPacket(2, False, False, None, -1, AddressFullPolicy.PAGE, 20000),
        AddressInfoPacket(1, True, True, Routing.MULTICAST, 1 << 20, AddressFullPolicy.BLOCK, 7),
    )
    assert orders == [AddressInfo("orders", True, "multicast", 1 << 20, "BLOCK", 7, True)]
    assert missing == [AddressInfo("private.x", False, "", -1, "PAGE", 20000, False)]
    assert outcomes.heard == {}  # the error callback hears nothing on success


def test_an_address_with_both_routing_types_is_described_so():
    driver = ready()
    outcomes = Outcomes()
    feed = ask(driver, "feed", outcomes)
    driver.sent()
    feed_answers(
        driver, AddressInfoPacket(1, True, True, Routing.BOTH, -1, AddressFullPolicy.PAGE, 9)
    )
    assert feed == [AddressInfo("feed", True, "anycast,multicast", -1, "PAGE", 9, True)]


def test_a_refused_query_fails_with_the_nodes_words():
    driver = ready()
    outcomes = Outcomes()
    answers = ask(driver, "orders", outcomes)
    driver.sent()
    reason = "user 'bob' lacks permission 'send' on address 'orders'"
    feed_answers(driver, Failed(1, ErrorCode.PERMISSION_DENIED, reason))
    error = outcomes.heard["orders"]
    assert isinstance(error, PermissionDenied)
    assert str(error) == f"query of address 'orders' refused (PERMISSION_DENIED): {reason}"
    assert answers == []


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (Ok(1), r"answered request 1 \(query of address 'orders'\) with OK"),
        (
            AddressInfoPacket(2, True, True, None, -1, AddressFullPolicy.PAGE, 1),
            r"answered request 2 \(begin transaction 1\) with ADDRESS_INFO",
        ),
        (
            AddressInfoPacket(9, True, True, None, -1, AddressFullPolicy.PAGE, 1),
            "answered request 9, which it was not sent",
        ),
    ],
)
def test_a_wrong_answer_is_a_protocol_error(answer, words):
    driver = ready()
    ask(driver, "orders", Outcomes())
    driver.session.begin(None)
    driver.sent()
    with pytest.raises(NodeProtocolError, match=words):
        driver.feed(answer)


def test_a_query_waits_for_the_login_and_is_asked_again_after_a_reconnection():
    driver = Driver(ClientSession(client_id="test"))
    outcomes = Outcomes()
    answers = ask(driver, "orders", outcomes)
    driver.session.connection_made()
    driver.sent()  # the CONNECT only
    driver.feed(Connected("node-a", "id-a", 1, -1))
    assert driver.session.node_id == "id-a"
    assert driver.sent() == [QueryAddress(1, "orders")]
    driver.session.connection_lost()  # before the node answered
    assert outcomes.heard == {}
    driver.session.connection_made()
    driver.sent()
    driver.feed(Connected("node-a", "id-a", 1, -1))
    assert driver.sent() == [QueryAddress(1, "orders")]
    feed_answers(
        driver, AddressInfoPacket(1, True, True, Routing.ANYCAST, -1, AddressFullPolicy.PAGE, 5)
    )
    assert answers == [AddressInfo("orders", True, "anycast", -1, "PAGE", 5, True)]


def test_a_query_pending_at_close_fails():
    driver = ready()
    outcomes = Outcomes()
    ask(driver, "orders", outcomes)
    driver.session.close(ClientClosed("the client was closed"))
    driver.events()
    assert isinstance(outcomes.heard["orders"], ClientClosed)
    with pytest.raises(ClientClosed):
        ask(driver, "orders", outcomes)


@pytest_twisted.ensureDeferred
async def test_the_client_asks_the_real_node(real):
    client = await real.client()
    assert client.node_id == "id-a"
    assert await client.address_info("orders") == AddressInfo(
        "orders", True, "anycast", -1, "PAGE", 20000, True
    )
    assert await client.address_info("brand.new") == AddressInfo(
        "brand.new", False, "anycast", -1, "PAGE", 20000, True
    )
    assert not real.broker.has_address("brand.new")


@pytest_twisted.ensureDeferred
async def test_a_refused_query_fails_its_deferred(tmp_path, clients):
    write_users(
        tmp_path / "users.toml",
        {"alice": ("alice-secret", ["producers"]), "bob": ("bob-secret", ["consumers"])},
    )
    node = await Node(tmp_path, SECURITY).start()
    try:
        url = f"tcp://127.0.0.1:{node.port.getHost().port}"
        alice = await clients(url, user="alice", password="alice-secret")
        bob = await clients(url, user="bob", password="bob-secret")
        assert (await alice.address_info("orders")).exists
        with pytest.raises(PermissionDenied, match="lacks permission 'send' on address 'orders'"):
            await bob.address_info("orders")
    finally:
        for client in clients.opened:
            await client.close()
        await node.stop()
