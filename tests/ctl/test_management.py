"""The management API over real HTTP on loopback, in front of a real broker on a real
SQLite store: what /status and /metrics say, and who may ask."""

from __future__ import annotations

import base64
import contextlib
import gc
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import reactor
from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Protocol
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.logger import globalLogPublisher
from twisted.web.client import Agent, HTTPConnectionPool, readBody
from twisted.web.http_headers import Headers

from bridge.config.node import parse_node_config
from bridge.ctl.drain import NodeDrain
from bridge.ctl.management import management_site
from bridge.node.broker import Broker
from bridge.node.queue import Delivery
from bridge.store.sqlite import SQLiteMessageStore
from security import ISecurityAuth, SecurityStore, Subject, load_security
from tests.security.helpers import FakeClock, write_users

NODE_ID = "7f3a0c1e-node-a"

# Twisted's readBody warns when a short body arrived whole before it was asked for (the
# transport it then sees has nothing to abort): nothing to act on here.
pytestmark = pytest.mark.filterwarnings("ignore:Using readBody with a transport:DeprecationWarning")


@contextlib.contextmanager
def open_broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker on a SQLite store in ``tmp_path``, closed when the block ends."""
    config = parse_node_config(
        {
            "node": {"name": "a", "data-dir": "data"},
            "address": [
                {"name": "orders", "routing": "anycast"},
                {"name": "news", "routing": "multicast"},
            ],
        },
        tmp_path / "node.toml",
    )
    opened = Broker(config, SQLiteMessageStore(config.data_dir, reactor))
    pytest_twisted.blockon(Deferred.fromCoroutine(opened.open()))
    try:
        yield opened
    finally:
        pytest_twisted.blockon(Deferred.fromCoroutine(opened.close()))


def security_store(tmp_path: Path, *, enabled: bool) -> SecurityStore:
    """Security on: root is an admin (manage on everything), bob only consumes."""
    if not enabled:
        return SecurityStore(
            load_security({"enabled": False}, str(tmp_path / "node.toml")), FakeClock()
        )
    write_users(
        tmp_path / "users.toml",
        {"root": ("root-secret", ["admins"]), "bob": ("bob-secret", ["consumers"])},
    )
    settings = load_security(
        {
            "users-file": "users.toml",
            "setting": [
                {"match": "orders", "consume": ["consumers"]},
                {"match": "#", "manage": ["admins"]},
            ],
        },
        str(tmp_path / "node.toml"),
    )
    return SecurityStore(settings, FakeClock())


@attrs.frozen
class Served:
    """A management site listening on loopback."""

    port: IListeningPort

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port.getHost().port}"


def serve(broker: Broker, security: SecurityStore) -> Served:
    site = management_site(
        broker, security, node_id=NODE_ID, reactor=reactor, connections=lambda: 5
    )
    return Served(reactor.listenTCP(0, site, interface="127.0.0.1"))


@contextlib.contextmanager
def serving(broker: Broker, tmp_path: Path, *, security: bool) -> Iterator[Served]:
    """The broker's management API on loopback, until the block ends."""
    server = serve(broker, security_store(tmp_path, enabled=security))
    try:
        yield server
    finally:
        pytest_twisted.blockon(server.port.stopListening())


@attrs.frozen
class Reply:
    code: int
    headers: Headers
    body: bytes

    def header(self, name: bytes) -> str | None:
        values = self.headers.getRawHeaders(name)
        return values[0].decode() if values else None

    def json(self) -> Any:
        return json.loads(self.body)


async def fetch(
    url: str,
    *,
    method: bytes = b"GET",
    credentials: tuple[str, str] | None = None,
    authorization: bytes | None = None,
) -> Reply:
    """One request on its own connection, closed when the reply is read."""
    headers = Headers()
    if credentials is not None:
        token = base64.b64encode(":".join(credentials).encode())
        authorization = b"Basic " + token
    if authorization is not None:
        headers.addRawHeader(b"authorization", authorization)
    agent = Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False))
    response = await agent.request(method, url.encode(), headers)
    body = await readBody(response)
    return Reply(response.code, response.headers, body)


async def fill(broker: Broker) -> list[Delivery]:
    """orders: 3 sent, 1 acknowledged, 1 dropped, 1 in flight; news: one subscription."""
    await broker.create_queue("news.sub", "news", durable=False)
    for body in (b"one", b"two", b"three"):
        await broker.send("orders", body, durable=True)
    deliveries: list[Delivery] = []
    broker.consume("orders", 1, deliveries.append)
    await broker.acknowledge("orders", 1, deliveries[0].delivery_id)
    await broker.nack("orders", 1, deliveries[1].delivery_id, requeue=False)
    await broker.send("news", b"extra", durable=False)
    return deliveries


@pytest_twisted.ensureDeferred
async def test_status_tells_the_node_its_addresses_and_its_queues(broker, served):
    await fill(broker)
    reply = await fetch(served.url + "/status")
    assert reply.code == 200
    assert reply.header(b"content-type") == "application/json"
    status = reply.json()
    assert status["node"]["name"] == "a"
    assert status["node"]["id"] == NODE_ID
    assert status["node"]["connections"] == 5
    assert 0 <= status["node"]["uptime_seconds"] < 60
    unlimited = {
        "max_size_bytes": -1,
        "address_full_policy": "PAGE",
        "full": False,
        "paged_messages": 0,
        "paged_bytes": 0,
        "messages_paged": 0,
        "messages_dropped": 0,
        "sends_refused": 0,
    }
    # In memory: news's message ("extra"), and orders's one in flight ("three").
    assert status["addresses"] == [
        {"name": "news", "routing": "multicast", "queues": ["news.sub"], "memory_bytes": 35}
        | unlimited,
        {"name": "orders", "routing": "anycast", "queues": ["orders"], "memory_bytes": 37}
        | unlimited,
    ]
    assert status["memory_bytes"] == 35 + 37
    assert status["global_max_size"] == broker.memory.max_size
    assert status["queues"] == [
        {
            "name": "news.sub",
            "address": "news",
            "durable": False,
            "depth": 1,
            "waiting": 1,
            "in_flight": 0,
            "consumers": 0,
            "messages_added": 1,
            "messages_acknowledged": 0,
            "messages_dropped": 0,
        },
        {
            "name": "orders",
            "address": "orders",
            "durable": True,
            "depth": 1,
            "waiting": 0,
            "in_flight": 1,
            "consumers": 1,
            "messages_added": 3,
            "messages_acknowledged": 1,
            "messages_dropped": 1,
        },
    ]
    assert status["paged_bytes"] == 0
    assert status["producers_blocked"] == 0


@pytest_twisted.ensureDeferred
async def test_metrics_are_prometheus_text_read_at_scrape_time(broker, served):
    before = await fetch(served.url + "/metrics")
    await fill(broker)
    reply = await fetch(served.url + "/metrics")
    assert reply.code == 200
    assert reply.header(b"content-type").startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(reply.body.decode())}

    def value(family: str, sample: str, **labels: str) -> float:
        found = [
            s.value for s in families[family].samples if s.name == sample and s.labels == labels
        ]
        assert len(found) == 1, (family, sample, labels)
        return found[0]

    orders = {"queue": "orders", "address": "orders"}
    assert value("txbridge_queue_depth", "txbridge_queue_depth", **orders) == 1
    assert value("txbridge_queue_in_flight", "txbridge_queue_in_flight", **orders) == 1
    assert value("txbridge_queue_consumers", "txbridge_queue_consumers", **orders) == 1
    added = "txbridge_queue_messages_added"
    assert value(added, added + "_total", **orders) == 3
    acknowledged = "txbridge_queue_messages_acknowledged"
    assert value(acknowledged, acknowledged + "_total", **orders) == 1
    dropped = "txbridge_queue_messages_dropped"
    assert value(dropped, dropped + "_total", **orders) == 1
    assert families[added].type == "counter"
    news = {"queue": "news.sub", "address": "news"}
    assert value("txbridge_queue_depth", "txbridge_queue_depth", **news) == 1
    assert value("txbridge_node_info", "txbridge_node_info", name="a", id=NODE_ID) == 1
    assert value("txbridge_connections", "txbridge_connections") == 5
    assert value("txbridge_paged_bytes", "txbridge_paged_bytes") == 0
    assert value("txbridge_memory_bytes", "txbridge_memory_bytes") == 35 + 37
    memory = "txbridge_address_memory_bytes"
    assert value(memory, memory, address="orders") == 37
    assert value("txbridge_address_full", "txbridge_address_full", address="orders") == 0
    refused = "txbridge_address_sends_refused"
    assert value(refused, refused + "_total", address="orders") == 0
    assert value("txbridge_producers_blocked", "txbridge_producers_blocked") == 0
    assert value("txbridge_node_uptime_seconds", "txbridge_node_uptime_seconds") >= 0
    # The queue news.sub did not exist at the first scrape: nothing is cached.
    assert b'queue="news.sub"' not in before.body


@pytest_twisted.ensureDeferred
async def test_unknown_paths_and_methods_are_refused_in_json(served):
    missing = await fetch(served.url + "/nothing")
    assert missing.code == 404
    assert missing.header(b"content-type") == "application/json"
    assert missing.json() == {
        "error": "no resource '/nothing' (there are /status, /metrics)",
        "status": 404,
    }
    posted = await fetch(served.url + "/status", method=b"POST")
    assert posted.code == 405
    assert posted.header(b"allow") == "GET, HEAD"
    assert posted.json() == {"error": "method POST not allowed: use GET", "status": 405}
    head = await fetch(served.url + "/status", method=b"HEAD")
    assert (head.code, head.body) == (200, b"")


@pytest_twisted.ensureDeferred
async def test_with_security_on_only_a_user_with_manage_gets_in(secured):
    for path in ("/status", "/metrics"):
        url = secured.url + path
        anonymous = await fetch(url)
        assert anonymous.code == 401
        assert anonymous.header(b"www-authenticate") == 'Basic realm="txbridge", charset="UTF-8"'
        assert anonymous.json()["error"] == "credentials required (HTTP Basic)"

        malformed = await fetch(url, authorization=b"Basic not-base64!")
        assert malformed.code == 401

        wrong = await fetch(url, credentials=("root", "guess"))
        assert wrong.code == 401
        assert wrong.header(b"www-authenticate") is not None
        assert wrong.json()["error"] == "authentication failed"

        denied = await fetch(url, credentials=("bob", "bob-secret"))
        assert denied.code == 403
        assert denied.json()["error"] == (
            "user 'bob' lacks permission 'manage' on address 'txbridge.management'"
        )

        allowed = await fetch(url, credentials=("root", "root-secret"))
        assert allowed.code == 200, allowed.body
    assert allowed.body.startswith(b"# HELP")


@pytest_twisted.ensureDeferred
async def test_a_client_gone_during_its_login_costs_nothing(broker, tmp_path):
    """The answer to a request whose connection closed while the password was checked is
    dropped, not written to the closed connection (which would fail in the reactor)."""
    security = security_store(tmp_path, enabled=True)
    checking: Deferred[None] = Deferred()
    go_on = threading.Event()
    authenticate = security.authenticate

    def held_authenticate(auth: ISecurityAuth) -> Subject:
        # Runs in the worker thread: hold the check until the client has gone.
        reactor.callFromThread(checking.callback, None)
        go_on.wait(timeout=30)
        return authenticate(auth)

    security.authenticate = held_authenticate  # type: ignore[method-assign]
    failures: list[object] = []

    def observe(event: dict[str, Any]) -> None:
        if "log_failure" in event:
            failures.append(event["log_failure"])

    globalLogPublisher.addObserver(observe)
    server = serve(broker, security)
    try:
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", server.port.getHost().port)
        client = await connectProtocol(endpoint, Protocol())
        token = base64.b64encode(b"root:root-secret")
        client.transport.write(
            b"GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: Basic " + token + b"\r\n\r\n"
        )
        await checking
        client.transport.loseConnection()
        for _ in range(4):  # the server reads the close within a few reactor turns
            await deferLater(reactor, 0, lambda: None)
        done = deferToThread(lambda: None)  # queued behind the held check
        go_on.set()
        await done
        await deferLater(reactor, 0, lambda: None)
        gc.collect()  # an unhandled failure of the request's coroutine is logged now
        assert failures == []
    finally:
        go_on.set()
        globalLogPublisher.removeObserver(observe)
        await server.port.stopListening()


@pytest_twisted.ensureDeferred
async def test_a_drain_that_finds_no_target_is_refused_and_changes_nothing(broker, tmp_path):
    closed: list[bool] = []

    def close() -> Deferred[None]:
        closed.append(True)
        return succeed(None)

    drain = NodeDrain(
        "a", NODE_ID, None, broker, reactor, members=None, close=close, stop=reactor.stop
    )
    security = security_store(tmp_path, enabled=False)
    site = management_site(broker, security, node_id=NODE_ID, reactor=reactor, drain=drain)
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    url = f"http://127.0.0.1:{port.getHost().port}"
    try:
        reply = await fetch(url + "/node/drain", method=b"POST")
        assert reply.code == 409
        assert reply.json()["error"] == (
            "cannot drain: the node has no [cluster]: there is no failover node to move to"
        )
        assert closed == []
        shown = (await fetch(url + "/status")).json()["drain"]
        assert (shown["state"], shown["target"], shown["queues"]) == ("FAILED", "", [])
        assert shown["reason"].startswith("the node has no [cluster]")
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_without_a_drain_there_is_no_drain_endpoint(served):
    reply = await fetch(served.url + "/node/drain", method=b"POST")
    assert reply.code == 404
    assert (await fetch(served.url + "/status")).json()["drain"] is None
