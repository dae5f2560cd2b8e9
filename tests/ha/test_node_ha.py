"""A node service with [ha] in this process, its database reached through a proxy the test
can cut: it opens nothing until it holds the lease; when the database goes away it stops
serving by the deadline (acceptors closed), stays up, and takes a new epoch when the
database is back."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from bridge.config.node import parse_node_config
from bridge.ctl.main import main
from bridge.ctl.service import NodeService
from bridge.ha.activation import HaState
from tests.ha.proxy import Cuttable, connects, get, via
from tests.postgresql import schema_url

TIMEOUT = 60.0
TIMINGS = {"ping": "1s", "reap": "5s", "query": "500ms"}
"""The nodes here share the test's reactor and a loaded machine: timings with room, so that
no renewal misses by luck and no node fences but where a test cuts its database."""


async def _until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` on the reactor until it holds, failing after TIMEOUT."""
    deadline = reactor.seconds() + TIMEOUT
    while not condition():
        assert reactor.seconds() < deadline, "the condition did not hold in time"
        await deferLater(reactor, 0.05)


def _within(deferred: Deferred[None]) -> Deferred[None]:
    """``deferred``, failing with TimeoutError after TIMEOUT (a loaded box is slow; the
    lease's own times are far shorter)."""
    return deferred.addTimeout(TIMEOUT, reactor)


@pytest_twisted.ensureDeferred
async def test_a_node_that_loses_the_database_stops_serving_and_comes_back(
    tmp_path: Path, pg_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    proxy = Cuttable()
    listening: IListeningPort = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(
        proxy
    )
    url = via(schema_url(pg_schema), listening.getHost().port)
    document = {
        "node": {"name": "a", "data-dir": "data"},
        "acceptor": [{"name": "core", "url": "tcp://127.0.0.1:0", "protocols": ["core"]}],
        "management": {"url": "http://127.0.0.1:0"},
        "store": {"type": "postgresql", "url": url},
        "ha": {
            "policy": "shared-store-primary",
            "lease-ping-time": TIMINGS["ping"],
            "lease-reap-time": TIMINGS["reap"],
            "lease-query-timeout": TIMINGS["query"],
        },
    }
    config = parse_node_config(document, tmp_path / "node.toml")
    service = NodeService(config, reactor, exit_on_failure=False)
    service.startService()
    await service.started
    ha = service.ha
    assert ha is not None
    try:
        if ha.state is not HaState.LIVE:
            await _within(ha.reached(HaState.LIVE))
        assert ha.epoch == 1
        port = service.ports["core"].getHost().port
        assert await connects(port)
        management = f"http://127.0.0.1:{service.ports['management'].getHost().port}"
        assert await deferToThread(main, ["ctl", "--url", management, "ha", "status"]) == 0
        shown = capsys.readouterr().out.splitlines()
        assert shown[0] == "LIVE (shared-store-primary)"
        assert re.fullmatch(r"live: a, epoch 1, lease left \d+ ms", shown[1])
        assert re.fullmatch(r"clock skew -?\d+ ms", shown[2])
        metrics = await deferToThread(get, management + "/metrics")
        assert "txbridge_ha_epoch 1.0" in metrics
        assert (
            'txbridge_ha_info{live="a",policy="shared-store-primary",state="LIVE"} 1.0' in metrics
        )

        fenced = _within(ha.reached(HaState.FENCED))
        backup = _within(ha.reached(HaState.BACKUP))
        await listening.stopListening()
        proxy.cut()
        await fenced
        await backup
        assert set(service.ports) == {"management"} and service.broker is None
        assert not await connects(port)  # the acceptor is closed
        assert await deferToThread(main, ["ctl", "--url", management, "ha", "status"]) == 0
        shown = capsys.readouterr().out.splitlines()
        assert shown[0] == "BACKUP (shared-store-primary)"
        assert shown[-1].startswith("last stopped serving: ")

        live = _within(ha.reached(HaState.LIVE))
        listening = await TCP4ServerEndpoint(
            reactor, urlsplit(url).port or 0, interface="127.0.0.1"
        ).listen(proxy)
        await live
        assert ha.epoch == 2
        assert await connects(service.ports["core"].getHost().port)
    finally:
        await service.stopService()
        await listening.stopListening()
        proxy.cut()


def _ha_service(
    tmp_path: Path,
    name: str,
    url: str,
    policy: str,
    reap: str = TIMINGS["reap"],
    *,
    ha: Mapping[str, str] | None = None,
    store: Mapping[str, str] | None = None,
) -> NodeService:
    """A node on PostgreSQL at ``url`` (or on ``store``) with [ha] ``policy`` at TIMINGS,
    ``ha``'s keys over them."""
    document = {
        "node": {"name": name, "data-dir": f"data-{name}"},
        "acceptor": [{"name": "core", "url": "tcp://127.0.0.1:0", "protocols": ["core"]}],
        "management": {"url": "http://127.0.0.1:0"},
        "store": dict(store) if store is not None else {"type": "postgresql", "url": url},
        "ha": {
            "policy": policy,
            "lease-ping-time": TIMINGS["ping"],
            "lease-reap-time": reap,
            "lease-query-timeout": TIMINGS["query"],
            **(ha or {}),
        },
    }
    config = parse_node_config(document, tmp_path / f"{name}.toml")
    return NodeService(config, reactor, exit_on_failure=False)


@pytest_twisted.ensureDeferred
async def test_a_soft_failover_hands_the_lease_to_the_backup(
    tmp_path: Path, pg_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = schema_url(pg_schema)
    a = _ha_service(tmp_path, "a", url, "shared-store-primary")
    b = _ha_service(tmp_path, "b", url, "shared-store-backup")
    a.startService()
    await a.started
    try:
        assert a.ha is not None
        if a.ha.state is not HaState.LIVE:
            await _within(a.ha.reached(HaState.LIVE))
        b.startService()
        await b.started
        assert b.ha is not None and b.ha.state is HaState.BACKUP
        assert set(b.ports) == {"management"}  # no acceptor while a backup
        await _until(lambda: a.ha is not None and a.ha.status().backups == ("b",))
        management = f"http://127.0.0.1:{a.ports['management'].getHost().port}"
        assert await deferToThread(main, ["ctl", "--url", management, "ha", "status"]) == 0
        assert "backups waiting: b" in capsys.readouterr().out.splitlines()
        b_live = _within(b.ha.reached(HaState.LIVE))
        a_backup = _within(a.ha.reached(HaState.BACKUP))
        assert await deferToThread(main, ["ctl", "--url", management, "ha", "failover"]) == 0
        assert capsys.readouterr().out.startswith("failover started")
        await a_backup
        await b_live
        assert (b.ha.epoch, a.ha.state, set(a.ports)) == (2, HaState.BACKUP, {"management"})
        # a sees b live at its next try, a reap after the hand-over
        await _until(lambda: a.ha is not None and a.ha.status().live == "b")
        assert await deferToThread(main, ["ctl", "--url", management, "ha", "status"]) == 0
        shown = capsys.readouterr().out.splitlines()
        assert shown[0] == "BACKUP (shared-store-primary)"
        assert shown[1].startswith("live: b, epoch 2")
        assert a.ha.machine.reason == "failover asked: another node is to be live"

        again = f"http://127.0.0.1:{b.ports['management'].getHost().port}"
        assert await deferToThread(main, ["ctl", "--url", again, "ha", "status"]) == 0
        assert capsys.readouterr().out.splitlines()[1].startswith("live: b, epoch 2")
    finally:
        await b.stopService()
        await a.stopService()


@pytest_twisted.ensureDeferred
async def test_a_node_cut_off_from_the_database_finds_another_live_when_it_is_back(
    tmp_path: Path, pg_schema: str
) -> None:
    """a loses the database; b (which still reaches it) takes the lease once a's expired,
    never before a stopped serving; when a is back it stays a backup of b."""
    proxy = Cuttable()
    listening: IListeningPort = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(
        proxy
    )
    direct = schema_url(pg_schema)
    # a reap of 3 s leaves a margin of 1.25 s for a loaded box to stop serving in
    a_url = via(direct, listening.getHost().port)
    a = _ha_service(tmp_path, "a", a_url, "shared-store-primary", reap="3s")
    b = _ha_service(tmp_path, "b", direct, "shared-store-backup", reap="3s")
    a.startService()
    await a.started
    try:
        assert a.ha is not None
        if a.ha.state is not HaState.LIVE:
            await _within(a.ha.reached(HaState.LIVE))
        b.startService()
        await b.started
        assert b.ha is not None

        def b_goes_live() -> None:
            assert a.ha is not None and a.ha.state is not HaState.LIVE
            assert "core" not in a.ports  # a stopped serving before b serves

        b_live = _within(b.ha.reached(HaState.ACTIVATING)).addCallback(lambda _: b_goes_live())
        a_backup = _within(a.ha.reached(HaState.BACKUP))
        port = listening.getHost().port
        await listening.stopListening()
        proxy.cut()
        await a_backup
        await b_live
        listening = await TCP4ServerEndpoint(reactor, port, interface="127.0.0.1").listen(proxy)
        await _until(lambda: a.ha is not None and a.ha.status().live == "b")
        assert a.ha.state is HaState.BACKUP and "core" not in a.ports
        assert b.ha.epoch == 2
    finally:
        await b.stopService()
        await a.stopService()
        await listening.stopListening()
        proxy.cut()
