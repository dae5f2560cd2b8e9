"""The node's side of a logged-in connection (``bridge.node.session``): permission checks,
addresses created on first use, and the wait for room on an address full under BLOCK,
the same for every head."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from bridge.config.node import AddressFullPolicy, Routing, parse_node_config
from bridge.message import Message
from bridge.node.broker import AddressNotFound, Broker
from bridge.node.session import ServerSession
from bridge.store.sqlite import SQLiteMessageStore
from security import SecurityStore
from security.errors import PermissionDenied
from security.permissions import Permission
from security.subject import AuthMethod, Subject
from tests.heads.conftest import SECURITY
from tests.security.helpers import write_users

SIZE = Message(0, "orders.in", False, {}, b"x" * 100).size


@pytest.fixture
def opened(tmp_path: Path):
    write_users(tmp_path / "users.toml", {})
    document = {
        "node": {"name": "a", "data-dir": "data"},
        "security": SECURITY,
        "address": [
            {
                "name": "orders.in",
                "routing": "anycast",
                "max-size-bytes": 3 * SIZE,
                "address-full-policy": "BLOCK",
            }
        ],
        "address-setting": [
            {"match": "private.#", "auto-create-addresses": False},
            {"match": "news.#", "default-routing-type": "multicast"},
        ],
    }
    config = parse_node_config(document, tmp_path / "node.toml")
    broker = Broker(config, SQLiteMessageStore(config.data_dir, reactor))
    pytest_twisted.blockon(Deferred.fromCoroutine(broker.open()))
    yield broker, SecurityStore(config.security, time.monotonic)
    pytest_twisted.blockon(Deferred.fromCoroutine(broker.close()))


def session(opened, roles: set[str], clock: Clock | None = None) -> ServerSession:
    broker, security = opened
    subject = Subject("someone", frozenset(roles), AuthMethod.PASSWORD)
    return ServerSession(broker, security, subject, clock or Clock())


def test_permissions_are_checked_for_the_logged_in_subject(opened) -> None:
    producer = session(opened, {"producers"})
    producer.check("orders.in", Permission.SEND)
    with pytest.raises(PermissionDenied, match="lacks permission 'consume' on address"):
        producer.check("orders.in", Permission.CONSUME, "orders.in")


def test_a_missing_address_needs_create_address_and_settings_that_allow_it(opened) -> None:
    producer, admin = session(opened, {"producers"}), session(opened, {"admins"})
    producer.check_address("orders.in")  # it exists: nothing more to check
    with pytest.raises(PermissionDenied, match=r"'create-address' on address 'brand\.new'"):
        producer.check_address("brand.new")
    admin.check_address("brand.new")
    with pytest.raises(AddressNotFound, match="auto-create-addresses is off for it"):
        admin.check_create("private.x")
    with pytest.raises(AddressNotFound, match="reserved for the node"):
        admin.check_create("$bridge.orders")
    assert admin.default_routing("news.today") is Routing.MULTICAST
    assert admin.default_routing("brand.new") is Routing.ANYCAST


def test_an_address_is_described_as_it_is_or_as_it_would_be_created(opened) -> None:
    admin = session(opened, {"admins"})
    known = admin.describe("orders.in")
    assert (known.exists, known.auto_create, known.routing) == (
        True,
        True,
        frozenset({Routing.ANYCAST}),
    )
    assert known.settings.address_full_policy is AddressFullPolicy.BLOCK
    news = admin.describe("news.today")
    assert (news.exists, news.routing) == (False, frozenset({Routing.MULTICAST}))
    private = admin.describe("private.x")
    assert (private.exists, private.auto_create, private.routing) == (False, False, frozenset())
    broker, _ = opened
    assert not broker.has_address("news.today")  # describing creates nothing


@pytest_twisted.ensureDeferred
async def test_a_wait_for_room_ends_on_the_turn_after_the_room_appears(opened) -> None:
    broker, _ = opened
    clock = Clock()
    producer = session(opened, {"producers"}, clock)
    for n in range(3):
        broker.publish(Message(0, "orders.in", False, {}, b"%0100d" % n))
    assert producer.full_under_block("orders.in")
    assert not producer.full_under_block("orders.elsewhere")
    woken: list[str] = []
    producer.wait_for_room("orders.in", lambda: woken.append("room"))
    assert producer.waiting_for_room("orders.in") and producer.blocked == 1
    deliveries = []
    broker.consume("orders.in", 1, deliveries.append)
    await broker.acknowledge("orders.in", 1, deliveries[0].delivery_id)
    assert woken == []  # not inside the acknowledgement
    clock.advance(0)
    assert woken == ["room"] and producer.blocked == 0


@pytest_twisted.ensureDeferred
async def test_a_closed_session_is_never_woken(opened) -> None:
    broker, _ = opened
    clock = Clock()
    waiting, woken_then_closed = (
        session(opened, {"admins"}, clock),
        session(opened, {"admins"}, clock),
    )
    for n in range(3):
        broker.publish(Message(0, "orders.in", False, {}, b"%0100d" % n))
    woken: list[str] = []
    waiting.wait_for_room("orders.in", lambda: woken.append("waiting"))
    woken_then_closed.wait_for_room("orders.in", lambda: woken.append("closed"))
    waiting.close()
    assert broker.addresses["orders.in"].memory.waiters != []  # the other one still waits
    deliveries = []
    broker.consume("orders.in", 1, deliveries.append)
    await broker.acknowledge("orders.in", 1, deliveries[0].delivery_id)
    woken_then_closed.close()  # after the room appeared, before its turn
    clock.advance(0)
    assert woken == [] and waiting.blocked == woken_then_closed.blocked == 0
