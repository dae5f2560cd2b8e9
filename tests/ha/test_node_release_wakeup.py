"""A backup takes the lease (or the shared store's file lock) the moment the live node
releases it (the release's notice), not at its next try: with a `lease-ping-time` of two
minutes, a backup that waited for its next try would miss every deadline here. After a
soft failover, the node that handed over is woken by the new live node's release, inside
its own wait of a reap (that its own release's notice does not count is tested on the
lease, test_lease_release_notices.py, and on the file lock, test_file_lock.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_twisted
from twisted.logger import LogEvent, formatEvent, globalLogPublisher

from bridge.ctl.service import NodeService
from bridge.ha.activation import HaState
from tests.ha.test_node_ha import TIMEOUT, _ha_service, _until, _within
from tests.postgresql import execute, schema_url

SLOW = {
    "lease-ping-time": "120s",
    "lease-reap-time": "300s",
    "lease-query-timeout": "2s",
    "critical-analyzer-timeout": "240s",
}
"""A backup's next try is two minutes away: only the release's notice brings it sooner
(every wait below is at most TIMEOUT, a minute)."""
assert TIMEOUT < 120


@pytest.fixture(params=["postgresql", "file-lock"])
def lock(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    """The lease's schema on PostgreSQL, or a shared SQLite store directory."""
    if request.param == "postgresql":
        schema: str = request.getfixturevalue("pg_schema")
        return schema
    return tmp_path / "shared"


async def _live_and_backup(tmp_path: Path, lock: str | Path) -> tuple[NodeService, NodeService]:
    """a LIVE, b a backup that has tried once and seen a live; on PostgreSQL (``lock`` a
    schema) or a shared store directory (``lock`` a path)."""
    if isinstance(lock, Path):
        url, store = "", {"type": "sqlite", "data-dir": str(lock)}
    else:
        url, store = schema_url(lock), None
    a = _ha_service(tmp_path, "a", url, "shared-store-primary", ha=SLOW, store=store)
    b = _ha_service(tmp_path, "b", url, "shared-store-backup", ha=SLOW, store=store)
    a.startService()
    await a.started
    assert a.ha is not None
    if a.ha.state is not HaState.LIVE:
        await _within(a.ha.reached(HaState.LIVE))
    b.startService()
    await b.started
    await _until(lambda: b.ha is not None and b.ha.status().live == "a")
    return a, b


@pytest_twisted.ensureDeferred
async def test_a_backup_takes_over_when_the_live_node_stops(tmp_path: Path, lock: str | Path):
    a, b = await _live_and_backup(tmp_path, lock)
    try:
        assert b.ha is not None and b.ha.state is HaState.BACKUP
        b_live = _within(b.ha.reached(HaState.LIVE))
        await a.stopService()  # releases the lease
        await b_live
        assert b.ha.epoch == 2
    finally:
        await b.stopService()
        await a.stopService()


@pytest_twisted.ensureDeferred
async def test_a_soft_failover_wakes_the_backup_not_the_node_handing_over(
    tmp_path: Path, lock: str | Path
):
    a, b = await _live_and_backup(tmp_path, lock)
    try:
        assert a.ha is not None and b.ha is not None
        b_live = _within(b.ha.reached(HaState.LIVE))
        assert a.ha.failover()
        await b_live
        assert (b.ha.epoch, a.ha.state) == (2, HaState.BACKUP)
        # b is live: a, holding off for a reap, does not try; b then stops and releases,
        # and a (now woken) takes the lease back well inside its hold-off
        a_live = _within(a.ha.reached(HaState.LIVE))
        await b.stopService()
        await a_live
        assert a.ha.epoch == 3
    finally:
        await b.stopService()
        await a.stopService()


def _end_listening_session(node: NodeService, schema: str) -> None:
    """End the database session on which ``node`` listens for the lease's releases."""
    assert node.ha is not None and node.ha._watch is not None
    pid = node.ha._watch._notices._connection.info.backend_pid  # type: ignore[attr-defined]
    [(ended,)] = execute(schema, "SELECT pg_terminate_backend(%s)", (pid,))
    assert ended


@pytest_twisted.ensureDeferred
async def test_a_live_node_that_loses_its_release_notices_says_it_does_not_need_them(
    tmp_path: Path, pg_schema: str
):
    """Live, a node keeps the connection that heard of releases while it was a backup;
    lost, it is no reason for a backup's warning (trying every lease-ping-time): the node
    says that, live, it has no use for it, and goes on serving."""
    a, b = await _live_and_backup(tmp_path, pg_schema)
    events: list[LogEvent] = []
    globalLogPublisher.addObserver(events.append)
    try:
        assert a.ha is not None and a.ha.state is HaState.LIVE
        _end_listening_session(a, pg_schema)
        await _until(lambda: any("live, the node does not need it" in _text(e) for e in events))
        assert not [e for e in events if "not listening for the lease's release" in _text(e)]
        assert a.ha.state is HaState.LIVE
    finally:
        globalLogPublisher.removeObserver(events.append)
        await b.stopService()
        await a.stopService()


def _text(event: LogEvent) -> str:
    return formatEvent(event) or ""
