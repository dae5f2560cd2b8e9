"""Bad bridge files on a real node process (issue 6): a node whose ``bridges-dir`` holds
one good file and bad ones (an unknown key, a bad URL, a bridge of a missing queue, and a
confirmation window larger than the target address may hold under BLOCK) starts; the good
bridge forwards; each bad one is reported naming its file and key: the files that cannot
be read in the node's log, the bridges that cannot run as FAILED in ``/status`` with
``last_error`` naming file and key."""

from __future__ import annotations

import pytest
import pytest_twisted

from tests.system.bridges import (
    Collector,
    Producers,
    bridge_table,
    check_delivered,
    wait_bridge,
    write_bridges,
)
from tests.system.flow import status
from tests.system.nodes import node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

COUNT = 500


@pytest_twisted.ensureDeferred
async def test_bad_bridge_files_are_named_and_the_good_bridge_forwards(nodes):
    b_document = node_document(
        "b",
        address=[
            {"name": "orders"},
            {"name": "small", "max-size-bytes": "64KiB", "address-full-policy": "BLOCK"},
        ],
    )
    b = await nodes(b_document, name="b").wait_started()
    folder = nodes.tmp_path / "a" / "bridges.d"
    write_bridges(folder, "good.toml", bridge_table("good", "orders", b.core_url))
    write_bridges(
        folder, "unknown-key.toml", bridge_table("typo", "orders", b.core_url, colour="blue")
    )
    write_bridges(folder, "bad-url.toml", bridge_table("bad-url", "orders", "http://127.0.0.1:1"))
    write_bridges(folder, "missing-queue.toml", bridge_table("lost", "nowhere", b.core_url))
    write_bridges(
        folder,
        "window.toml",
        bridge_table(
            "too-wide",
            "small-source",
            b.core_url,
            **{"forwarding-address": "small", "confirmation-window-size": "1MiB"},
        ),
    )
    a_document = node_document("a", address=[{"name": "orders"}, {"name": "small-source"}])
    a_document["node"]["bridges-dir"] = "bridges.d"
    a = await nodes(a_document, name="a").wait_started()

    lost = await wait_bridge(a, "lost", lambda e: e["state"] == "FAILED", "fails: no queue")
    assert "missing-queue.toml" in lost["last_error"], lost
    assert "bridge[0].queue" in lost["last_error"] and "nowhere" in lost["last_error"], lost
    wide = await wait_bridge(
        a, "too-wide", lambda e: e["state"] == "FAILED", "fails: window over BLOCK limit"
    )
    assert "window.toml" in wide["last_error"], wide
    assert "bridge[0].confirmation-window-size" in wide["last_error"], wide
    assert "BLOCK" in wide["last_error"], wide

    log = a.output
    assert "unknown-key.toml" in log and "bridge[0].colour" in log, log[-3000:]
    assert "bad-url.toml" in log and "bridge[0].target" in log, log[-3000:]
    names = {entry["name"] for entry in (await status(a))["bridges"]}
    assert names == {"good", "lost", "too-wide"}, names

    good = await wait_bridge(a, "good", lambda e: e["state"] == "STARTED", "starts")
    assert good["last_error"] is None, good
    collector = Collector(lambda: b.core_url, "orders").start()
    producers = Producers(lambda: a.core_url, "orders", producers=1, count=COUNT).start()
    await producers.done(timeout=60)
    await collector.until(lambda: collector.distinct() >= COUNT, "the good bridge forwards", 60)
    await collector.stop()
    check_delivered(producers, collector)
    assert collector.order["p0"] == list(range(COUNT))
