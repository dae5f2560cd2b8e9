"""``txbridge ctl bridge status|pause|resume|stop|start NAME`` and ``txbridge ctl reload``
against a real node process (issue 6): each command answers with exit status 0, the
bridge's state in ``/status`` follows, a paused or stopped bridge takes nothing (its
messages wait on the source), and a bridge file added to ``bridges-dir`` runs after a
reload."""

from __future__ import annotations

import json

import pytest
import pytest_twisted

from tests.system.bridges import (
    Collector,
    Producers,
    bridge_table,
    check_delivered,
    ctl,
    wait_bridge,
    wait_queue_empty,
    write_bridges,
)
from tests.system.flow import queue_of, status
from tests.system.nodes import node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

BATCH = 200


async def ok(node, *args: str) -> str:
    done = await ctl(node, *args)
    assert done.returncode == 0, f"txbridge ctl {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done.stdout


@pytest_twisted.ensureDeferred
async def test_ctl_operates_a_bridge_and_reloads_the_bridge_files(nodes):
    b_document = node_document("b", address=[{"name": "orders"}, {"name": "audit"}])
    b = await nodes(b_document, name="b").wait_started()
    folder = nodes.tmp_path / "a" / "bridges.d"
    write_bridges(folder, "orders.toml", bridge_table("orders-to-b", "orders", b.core_url))
    a_document = node_document("a", address=[{"name": "orders"}, {"name": "audit"}])
    a_document["node"]["bridges-dir"] = "bridges.d"
    a = await nodes(a_document, name="a").wait_started()
    await wait_bridge(a, "orders-to-b", lambda e: e["state"] == "STARTED", "starts")

    shown = await ok(a, "bridge", "status")
    assert "orders-to-b" in shown and "STARTED" in shown, shown
    shown = json.loads(await ok(a, "bridge", "status", "--json"))
    assert "orders-to-b" in json.dumps(shown), shown

    collector = Collector(lambda: b.core_url, "orders").start()
    producers = Producers(lambda: a.core_url, "orders", producers=1, count=4 * BATCH)

    await ok(a, "bridge", "pause", "orders-to-b")
    entry = await wait_bridge(a, "orders-to-b", lambda e: True, "status")
    assert entry["state"] == "PAUSED", entry
    producers.count = BATCH
    await producers.start().done(timeout=60)
    assert queue_of(await status(a), "orders")["depth"] == BATCH, "a paused bridge took"
    assert collector.distinct() == 0

    await ok(a, "bridge", "resume", "orders-to-b")
    await collector.until(lambda: collector.distinct() >= BATCH, "forwards once resumed", 30)
    await wait_bridge(a, "orders-to-b", lambda e: e["state"] == "STARTED", "resumed")

    await ok(a, "bridge", "stop", "orders-to-b")
    entry = await wait_bridge(a, "orders-to-b", lambda e: True, "status")
    assert entry["state"] == "STOPPED" and entry["pending_confirmations"] == 0, entry
    producers.count = 2 * BATCH
    await producers.start().done(timeout=60)
    assert queue_of(await status(a), "orders")["depth"] == BATCH, "a stopped bridge took"

    await ok(a, "bridge", "start", "orders-to-b")
    await collector.until(lambda: collector.distinct() >= 2 * BATCH, "forwards once started", 30)
    await wait_queue_empty(a, "orders")
    shown = await ok(a, "bridge", "status", "orders-to-b")
    assert "STARTED" in shown, shown

    unknown = await ctl(a, "bridge", "pause", "no-such-bridge")
    assert unknown.returncode != 0 and "no-such-bridge" in unknown.stderr, unknown

    write_bridges(folder, "audit.toml", bridge_table("audit-to-b", "audit", b.core_url))
    await ok(a, "reload")
    await wait_bridge(a, "audit-to-b", lambda e: e["state"] == "STARTED", "starts on reload")
    audit = Collector(lambda: b.core_url, "audit").start()
    audited = Producers(lambda: a.core_url, "audit", producers=1, count=BATCH).start()
    await audited.done(timeout=60)
    await audit.until(lambda: audit.distinct() >= BATCH, "the reloaded bridge forwards", 30)
    untouched = await wait_bridge(a, "orders-to-b", lambda e: True, "status")
    assert untouched["state"] == "STARTED", untouched

    await audit.stop()
    await collector.stop()
    check_delivered(producers, collector)
    check_delivered(audited, audit)
    assert collector.order["p0"] == list(range(2 * BATCH))
