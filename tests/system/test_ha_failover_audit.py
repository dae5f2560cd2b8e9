"""kill -9 of the live node in the middle of a durable send run: nodes a (primary) and b
(backup) share one store (a PostgreSQL schema, or an SQLite store directory under a file
lock); a traced producer and a traced consumer work through a; a is killed; b is live
within reap + ping of the kill; both clients carry on with b; the audit of their event
logs finds nothing confirmed lost, and every message received twice came the second time
as a redelivery.

Here the backup listens on the live node's core port: it binds the port when it becomes
live, as a node behind one virtual address would, and the clients' own reconnect policy
takes them there (unconfirmed sends resent with their duplicate ids, the consumer created
again). Clients given both nodes' URLs are tested in test_ha_client_urls.py, large
messages in test_ha_large.py."""

from __future__ import annotations

import pytest
import pytest_twisted

from tests.system.ha import SLACK, ha_node, kill_under_audited_load


@pytest.mark.system
@pytest.mark.timeout(400)
@pytest_twisted.ensureDeferred
async def test_kill_9_of_the_live_node_loses_nothing_confirmed(
    nodes, shared_store, tmp_path, spark
):
    url = shared_store
    primary = nodes(ha_node("a", url, "shared-store-primary"), name="a")
    await primary.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await primary.wait_started(SLACK)
    port = primary.ports["core"]
    document = ha_node("b", url, "shared-store-backup")
    document["acceptor"][0]["url"] = f"tcp://127.0.0.1:{port}"  # bound once b is live
    backup = nodes(document, name="b")
    await backup.wait_for(r"node b: live is a, epoch 1", SLACK)

    await kill_under_audited_load(primary, backup, tmp_path, spark)
