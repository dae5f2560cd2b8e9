"""The node's side of a connection (``bridge.node.session``): its life (a machine, tested
without a reactor), permission checks, addresses created on first use, and the wait for
room on an address full under BLOCK, the same for every head."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import pytest_twisted
from automat import NoTransition
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from bridge.config.node import AddressFullPolicy, Routing, parse_node_config
from bridge.message import Message
from bridge.node.broker import AddressNotFound, Broker
from bridge.node.session import ServerSession, SessionState
from bridge.store.sqlite import SQLiteMessageStore
from security import SecurityStore
from security.errors import AuthenticationFailed, PermissionDenied
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


class Heard:
    """A head that records what it hears of a login."""

    def __init__(self) -> None:
        self.heard: list[object] = []

    def logged_in(self, subject: Subject) -> None:
        self.heard.append(subject)

    def login_refused(self, reason: str) -> None:
        self.heard.append(reason)


def session(opened, roles: set[str], clock: Clock | None = None) -> ServerSession:
    """A session logged in as a subject with ``roles``."""
    broker, security = opened
    subject = Subject("someone", frozenset(roles), AuthMethod.PASSWORD)
    logged_in = ServerSession(broker, security, clock or Clock(), Heard())
    logged_in.log_in(succeed(subject))
    return logged_in


# -- its life, without a reactor: the broker and the security store are never called --


def unopened() -> tuple[ServerSession, Heard]:
    heard = Heard()
    return ServerSession(None, None, Clock(), heard), heard  # type: ignore[arg-type]


ALICE = Subject("alice", frozenset(), AuthMethod.PASSWORD)


def test_a_login_accepted_opens_the_session_and_tells_the_head() -> None:
    node, heard = unopened()
    assert node.state is SessionState.CONNECTED and node.subject is None
    login: Deferred[Subject] = Deferred()
    node.log_in(login)
    assert node.state is SessionState.LOGGING_IN and heard.heard == []
    login.callback(ALICE)
    assert (node.state, node.subject, heard.heard) == (SessionState.OPEN, ALICE, [ALICE])
    node.close()
    assert node.state is SessionState.CLOSING
    node.close()  # said goodbye twice: nothing more
    node.lost()
    assert node.state is SessionState.CLOSED and node.life.listener is None


def test_a_login_refused_closes_the_session_with_the_refusals_words() -> None:
    node, heard = unopened()
    node.log_in(_failed(AuthenticationFailed("bad password")))
    assert node.state is SessionState.CLOSING and heard.heard == ["bad password"]
    assert node.subject is None


def _failed(error: Exception) -> Deferred[Subject]:
    login: Deferred[Subject] = Deferred()
    login.errback(Failure(error))
    return login


def test_a_connection_lost_while_logging_in_cancels_the_login_and_hears_nothing() -> None:
    node, heard = unopened()
    cancelled: list[bool] = []
    login: Deferred[Subject] = Deferred(lambda _: cancelled.append(True))
    node.log_in(login)
    node.lost()
    assert cancelled == [True] and node.state is SessionState.CLOSED
    assert login.called and heard.heard == []  # its CancelledError was taken, not told
    login.addErrback(lambda failure: failure.trap(CancelledError))


def test_an_answer_after_the_goodbye_is_not_heard() -> None:
    node, heard = unopened()
    login: Deferred[Subject] = Deferred()
    node.log_in(login)
    node.close()  # a frame the head refuses while the login waits
    login.callback(ALICE)
    assert (node.state, node.subject, heard.heard) == (SessionState.CLOSING, None, [])


def test_a_session_logs_in_once() -> None:
    node, _ = unopened()
    node.log_in(succeed(ALICE))
    with pytest.raises(NoTransition):
        node.log_in(succeed(ALICE))
    node.lost()
    node.lost()  # gone twice: nothing more
    node.close()
    assert node.state is SessionState.CLOSED


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
    waiting.lost()
    assert broker.addresses["orders.in"].memory.waiters != []  # the other one still waits
    deliveries = []
    broker.consume("orders.in", 1, deliveries.append)
    await broker.acknowledge("orders.in", 1, deliveries[0].delivery_id)
    woken_then_closed.lost()  # after the room appeared, before its turn
    clock.advance(0)
    assert woken == [] and waiting.blocked == woken_then_closed.blocked == 0
