"""Bridges in the management API and in ``txbridge ctl``: ``/status``'s bridges, their
metrics, ``POST /bridges/NAME/ACTION`` and ``POST /reload``, over real HTTP on loopback,
and the ``ctl bridge ...`` and ``ctl reload`` commands against that site."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import reactor
from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer
from zope.interface.verify import verifyObject

from bridge.ctl.management import management_site
from bridge.ctl.status import BridgeStatus, ManagementClient, Status, format_bridges
from bridge.forward.interfaces import IBridges, UnknownBridge
from bridge.forward.status import BridgeSnapshot, BridgeState
from bridge.node.broker import Broker
from security import SecurityStore
from tests.ctl.test_management import NODE_ID, Served, fetch, security_store
from tests.ctl.test_status import SAMPLE, ctl

pytestmark = pytest.mark.filterwarnings("ignore:Using readBody with a transport:DeprecationWarning")


def snapshot(name: str, state: BridgeState, **changes: object) -> BridgeSnapshot:
    started = BridgeSnapshot(
        name=name,
        state=state,
        queue="orders",
        targets=("tcp://127.0.0.1:61617", "tcp://127.0.0.1:61618"),
        connected_to="tcp://127.0.0.1:61617",
        last_error=None,
        messages_forwarded=1200,
        bytes_forwarded=1228800,
        messages_skipped=3,
        pending_confirmations=17,
        paused_writability_seconds=1.5,
        paused_credits_seconds=0.25,
        reconnects=2,
        source="bridges.d/a.toml bridge[0]",
        pending_ack_timeout=60.0,
    )
    return attrs.evolve(started, **changes)


@implementer(IBridges)
class Bridges:
    """Stands in for the node's bridges (bridge.forward's runtime, which has its own
    tests): it holds snapshots, and an operation changes the state when the Deferred the
    test may hold fires; ``reached`` fires with the name when an operation is asked."""

    def __init__(self, *snapshots: BridgeSnapshot) -> None:
        self.by_name = {each.name: each for each in snapshots}
        self.held: Deferred[None] | None = None
        self.reached: Deferred[str] | None = None
        self.refusal: Exception | None = None
        self.reload_errors: list[str] = []
        self.reload_failure: Exception | None = None

    def snapshots(self) -> list[BridgeSnapshot]:
        return list(self.by_name.values())

    def _change(self, name: str, state: BridgeState) -> Deferred[None]:
        if name not in self.by_name:
            return fail(UnknownBridge(name))
        if self.refusal is not None:
            return fail(self.refusal)
        reached, self.reached = self.reached, None
        if reached is not None:
            reached.callback(name)
        done = self.held or succeed(None)

        def changed(_: None) -> None:
            self.by_name[name] = attrs.evolve(self.by_name[name], state=state)

        return done.addCallback(changed)

    def start(self, name: str) -> Deferred[None]:
        return self._change(name, BridgeState.STARTED)

    def stop(self, name: str) -> Deferred[None]:
        return self._change(name, BridgeState.STOPPED)

    def pause(self, name: str) -> Deferred[None]:
        return self._change(name, BridgeState.PAUSED)

    def resume(self, name: str) -> Deferred[None]:
        return self._change(name, BridgeState.STARTED)

    def reload(self) -> Deferred[list[str]]:
        if self.reload_failure is not None:
            return fail(self.reload_failure)
        return succeed(self.reload_errors)


@contextlib.contextmanager
def serving_bridges(
    broker: Broker, security: SecurityStore, bridges: IBridges | None
) -> Iterator[Served]:
    site = management_site(broker, security, node_id=NODE_ID, reactor=reactor, bridges=bridges)
    served = Served(reactor.listenTCP(0, site, interface="127.0.0.1"))
    try:
        yield served
    finally:
        pytest_twisted.blockon(served.port.stopListening())


@pytest.fixture
def bridges() -> Bridges:
    made = Bridges(
        snapshot("b-to-c", BridgeState.FAILED, connected_to=None, last_error="refused: FAIL"),
        snapshot("a-to-b", BridgeState.STARTED),
    )
    assert verifyObject(IBridges, made)
    return made


@pytest.fixture
def with_bridges(broker: Broker, tmp_path: Path, bridges: Bridges) -> Iterator[Served]:
    with serving_bridges(broker, security_store(tmp_path, enabled=False), bridges) as served:
        yield served


@pytest.fixture
def secured_bridges(broker: Broker, tmp_path: Path, bridges: Bridges) -> Iterator[Served]:
    with serving_bridges(broker, security_store(tmp_path, enabled=True), bridges) as served:
        yield served


@pytest_twisted.ensureDeferred
async def test_status_shows_each_bridge_by_name(with_bridges):
    status = (await fetch(with_bridges.url + "/status")).json()
    assert status["bridges"] == [
        {
            "name": "a-to-b",
            "state": "STARTED",
            "queue": "orders",
            "targets": ["tcp://127.0.0.1:61617", "tcp://127.0.0.1:61618"],
            "connected_to": "tcp://127.0.0.1:61617",
            "last_error": None,
            "messages_forwarded": 1200,
            "bytes_forwarded": 1228800,
            "messages_skipped": 3,
            "pending_confirmations": 17,
            "paused_writability_seconds": 1.5,
            "paused_credits_seconds": 0.25,
            "reconnects": 2,
            "source": "bridges.d/a.toml bridge[0]",
            "pending_ack_timeout": 60.0,
        },
        status["bridges"][0]
        | {"name": "b-to-c", "state": "FAILED", "connected_to": None}
        | {"last_error": "refused: FAIL"},
    ]
    assert Status.from_json(status).bridges[1].last_error == "refused: FAIL"


@pytest_twisted.ensureDeferred
async def test_a_node_without_bridges_shows_none_and_takes_no_posts(served):
    assert (await fetch(served.url + "/status")).json()["bridges"] == []
    reload = await fetch(served.url + "/reload", method=b"POST")
    assert reload.code == 404
    assert reload.json()["error"] == "no resource '/reload' (there are /status, /metrics)"


@pytest_twisted.ensureDeferred
async def test_metrics_per_bridge(with_bridges):
    body = (await fetch(with_bridges.url + "/metrics")).body.decode()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name.startswith("txbridge_bridge_")
    }
    a = (("bridge", "a-to-b"),)
    assert samples[("txbridge_bridge_messages_forwarded_total", a)] == 1200
    assert samples[("txbridge_bridge_bytes_forwarded_total", a)] == 1228800
    assert samples[("txbridge_bridge_messages_skipped_total", a)] == 3
    assert samples[("txbridge_bridge_pending_confirmations", a)] == 17
    assert samples[("txbridge_bridge_paused_writability_seconds_total", a)] == 1.5
    assert samples[("txbridge_bridge_paused_credits_seconds_total", a)] == 0.25
    assert samples[("txbridge_bridge_reconnects_total", a)] == 2
    assert samples[("txbridge_bridge_up", a)] == 1
    assert samples[("txbridge_bridge_up", (("bridge", "b-to-c"),))] == 0
    states = {
        (dict(labels)["bridge"], dict(labels)["state"]): value
        for (name, labels), value in samples.items()
        if name == "txbridge_bridge_state"
    }
    assert len(states) == 2 * len(BridgeState)
    assert {key for key, value in states.items() if value == 1} == {
        ("a-to-b", "STARTED"),
        ("b-to-c", "FAILED"),
    }
    assert "# TYPE txbridge_bridge_messages_forwarded_total counter" in body


@pytest_twisted.ensureDeferred
async def test_an_operation_answers_when_the_bridge_has_done_it(with_bridges, bridges):
    bridges.held, bridges.reached = Deferred(), Deferred()
    answering = Deferred.fromCoroutine(
        fetch(with_bridges.url + "/bridges/a-to-b/pause", method=b"POST")
    )
    assert await bridges.reached == "a-to-b"
    await fetch(with_bridges.url + "/status")  # a whole request and answer meanwhile
    assert not answering.called
    held, bridges.held = bridges.held, None
    held.callback(None)
    reply = await answering
    assert (reply.code, reply.json()) == (200, {"ok": True})
    assert bridges.by_name["a-to-b"].state is BridgeState.PAUSED
    for action, state in (("resume", "STARTED"), ("stop", "STOPPED"), ("start", "STARTED")):
        reply = await fetch(with_bridges.url + f"/bridges/a-to-b/{action}", method=b"POST")
        assert reply.json() == {"ok": True}
        assert bridges.by_name["a-to-b"].state == state


@pytest_twisted.ensureDeferred
async def test_operations_refused_are_named(with_bridges, bridges):
    url = with_bridges.url
    unknown = await fetch(url + "/bridges/nobody/stop", method=b"POST")
    assert (unknown.code, unknown.json()["error"]) == (404, "no bridge 'nobody'")
    bridges.refusal = RuntimeError("it is STOPPED")
    refused = await fetch(url + "/bridges/a-to-b/pause", method=b"POST")
    assert (refused.code, refused.json()) == (
        409,
        {"error": "cannot pause bridge 'a-to-b': it is STOPPED", "status": 409},
    )
    got = await fetch(url + "/bridges/a-to-b/pause")
    assert (got.code, got.header(b"allow")) == (405, "POST")
    assert got.json()["error"] == "method GET not allowed: use POST"
    posted = await fetch(url + "/status", method=b"POST")
    assert (posted.code, posted.header(b"allow")) == (405, "GET, HEAD")
    for path in ("/bridges/a-to-b/explode", "/bridges//pause", "/bridges/a-to-b/pause/now"):
        missing = await fetch(url + path, method=b"POST")
        assert missing.code == 404
        assert missing.json()["error"] == (
            f"no resource {path!r} (there are /status, /metrics, /reload, "
            "/bridges/NAME/pause|resume|stop|start)"
        )


@pytest_twisted.ensureDeferred
async def test_reload_answers_the_errors(with_bridges, bridges):
    url = with_bridges.url + "/reload"
    reply = await fetch(url, method=b"POST")
    assert (reply.code, reply.json()) == (200, {"ok": True, "errors": []})
    bridges.reload_errors = ["bridges.d/b.toml: bridge[0].target: is required"]
    reply = await fetch(url, method=b"POST")
    assert reply.json() == {"ok": False, "errors": bridges.reload_errors}
    bridges.reload_failure = OSError("disk gone")
    reply = await fetch(url, method=b"POST")
    assert (reply.code, reply.json()["error"]) == (500, "reload failed: disk gone")
    assert (await fetch(url)).code == 405


@pytest_twisted.ensureDeferred
async def test_operations_need_manage_as_reads_do(secured_bridges, bridges):
    url = secured_bridges.url + "/bridges/a-to-b/stop"
    assert (await fetch(url, method=b"POST")).code == 401
    denied = await fetch(url, method=b"POST", credentials=("bob", "bob-secret"))
    assert denied.code == 403
    assert bridges.by_name["a-to-b"].state is BridgeState.STARTED
    allowed = await fetch(url, method=b"POST", credentials=("root", "root-secret"))
    assert (allowed.code, allowed.json()) == (200, {"ok": True})
    assert bridges.by_name["a-to-b"].state is BridgeState.STOPPED
    assert (await fetch(secured_bridges.url + "/reload", method=b"POST")).code == 401


def test_the_bridges_read_back_and_an_older_node_has_none():
    with_bridges = attrs.evolve(
        SAMPLE,
        bridges=(BridgeStatus(**attrs.asdict(snapshot("a", BridgeState.PAUSED), recurse=False)),),
    )
    document = json.loads(json.dumps(with_bridges.to_json()))
    assert Status.from_json(document) == with_bridges
    del document["bridges"]
    assert Status.from_json(document).bridges == ()


def test_a_person_reads_the_bridges_as_a_table():
    rows = (
        BridgeStatus(**attrs.asdict(snapshot("a-to-b", BridgeState.STARTED), recurse=False)),
        BridgeStatus(
            **attrs.asdict(
                snapshot(
                    "b-to-c",
                    BridgeState.FAILED,
                    connected_to=None,
                    last_error="refused",
                    pending_confirmations=0,
                ),
                recurse=False,
            )
        ),
    )
    assert format_bridges(rows) == (
        "BRIDGE  STATE    CONNECTED TO           FORWARDED  PENDING  LAST ERROR\n"
        "a-to-b  STARTED  tcp://127.0.0.1:61617       1200       17  -\n"
        "b-to-c  FAILED   -                           1200        0  refused"
    )
    assert format_bridges(()) == "no bridges"


@pytest_twisted.ensureDeferred
async def test_ctl_bridge_status(with_bridges, capsys):
    assert await ctl("--url", with_bridges.url, "bridge", "status") == 0
    assert capsys.readouterr().out.splitlines() == [
        "BRIDGE  STATE    CONNECTED TO           FORWARDED  PENDING  LAST ERROR",
        "a-to-b  STARTED  tcp://127.0.0.1:61617       1200       17  -",
        "b-to-c  FAILED   -                           1200       17  refused: FAIL",
    ]
    assert await ctl("--url", with_bridges.url, "bridge", "status", "b-to-c", "--json") == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert (shown["name"], shown["state"], shown["connected_to"]) == ("b-to-c", "FAILED", None)
    assert await ctl("--url", with_bridges.url, "bridge", "status", "nobody") == 2
    assert capsys.readouterr().err == (
        f"txbridge ctl bridge status: {with_bridges.url}: no bridge 'nobody'\n"
    )


@pytest_twisted.ensureDeferred
async def test_ctl_bridge_operations(with_bridges, bridges, capsys):
    url = with_bridges.url
    assert await ctl("--url", url, "bridge", "pause", "a-to-b") == 0
    assert capsys.readouterr().out == "bridge a-to-b paused\n"
    assert bridges.by_name["a-to-b"].state is BridgeState.PAUSED
    assert await ctl("--url", url, "bridge", "resume", "a-to-b") == 0
    assert capsys.readouterr().out == "bridge a-to-b resumed\n"
    assert await ctl("--url", url, "bridge", "stop", "a-to-b") == 0
    assert await ctl("--url", url, "bridge", "start", "a-to-b") == 0
    assert capsys.readouterr().out == "bridge a-to-b stopped\nbridge a-to-b started\n"
    assert await ctl("--url", url, "bridge", "resume", "no/body") == 2
    assert capsys.readouterr().err == (
        f"txbridge ctl bridge resume: {url}: HTTP 404: no bridge 'no/body'\n"
    )
    assert await ctl("--url", url, "bridge", "stop", "no/body") == 2
    assert capsys.readouterr().err == (
        f"txbridge ctl bridge stop: {url}: HTTP 404: no bridge 'no/body'\n"
    )
    assert await ctl("--url", url, "bridge", "pause", "no/body") == 2
    assert capsys.readouterr().err == (
        f"txbridge ctl bridge pause: {url}: HTTP 404: no bridge 'no/body'\n"
    )
    bridges.refusal = RuntimeError("it is FAILED")
    assert await ctl("--url", url, "bridge", "pause", "b-to-c") == 2
    assert capsys.readouterr().err == (
        f"txbridge ctl bridge pause: {url}: HTTP 409: cannot pause bridge 'b-to-c': it is FAILED\n"
    )


@pytest_twisted.ensureDeferred
async def test_ctl_reload(with_bridges, bridges, capsys):
    url = with_bridges.url
    assert await ctl("--url", url, "reload") == 0
    assert capsys.readouterr().out == "reloaded\n"
    bridges.reload_errors = [
        "bridges.d/b.toml: bridge[0].target: is required",
        "bridges.d/c.toml: is not valid TOML: Expected '=' after a key (at line 1, column 3)",
    ]
    assert await ctl("--url", url, "reload") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [f"txbridge ctl reload: {url}: {e}" for e in bridges.reload_errors]


@pytest_twisted.ensureDeferred
async def test_ctl_reload_against_a_node_without_bridges(served, capsys):
    assert await ctl("--url", served.url, "reload") == 2
    assert capsys.readouterr().err == (
        f"txbridge ctl reload: {served.url}: HTTP 404: no resource '/reload' "
        "(there are /status, /metrics)\n"
    )


@pytest_twisted.ensureDeferred
async def test_ctl_pause_and_stop_wait_as_long_as_the_bridge_may(
    with_bridges, bridges, capsys, monkeypatch
):
    """A pause or stop may wait out the bridge's pending-ack-timeout: without --timeout,
    ctl waits that long plus 10 s; other actions and a given --timeout are unchanged."""
    bridges.by_name["a-to-b"] = snapshot("a-to-b", BridgeState.STARTED, pending_ack_timeout=75.0)
    timeouts: list[tuple[str, float]] = []
    post_json = ManagementClient.post_json

    def recording(self: ManagementClient, path: str) -> object:
        timeouts.append((path.rsplit("/", 1)[1], self.timeout))
        return post_json(self, path)

    monkeypatch.setattr(ManagementClient, "post_json", recording)
    url = with_bridges.url
    for action in ("pause", "resume", "stop", "start"):
        assert await ctl("--url", url, "bridge", action, "a-to-b") == 0
    assert await ctl("--url", url, "--timeout", "3", "bridge", "pause", "a-to-b") == 0
    assert timeouts == [
        ("pause", 85.0),
        ("resume", 10.0),
        ("stop", 85.0),
        ("start", 10.0),
        ("pause", 3.0),
    ]
