"""Clients that follow the failover map, with real members (tests/system/cluster.py):

- kill -9 of node a under a traced producer's and consumer's load: both retry a, then go
  to a's first failover node, b, which redirects them to c, the backup that took a's
  store over; every send is confirmed, and the audit finds nothing lost and every repeat
  flagged as a redelivery;
- node b killed and started again within its clients' retry window: they stay on b.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread

from bridge import events
from bridge.client.api import ReceivedMessage, connect
from bridge.client.errors import ClientError
from tests.forward.conftest import eventually
from tests.system.audit_run import audit, check_failover
from tests.system.cluster import member, three_members
from tests.system.ha import COUNT, KILL_AFTER, LEAD, SLACK, produce_traced
from transport.reconnect import ReconnectPolicy

FOLLOW = ReconnectPolicy(0.1, 1.0, 0.1, reconnect_attempts=5)
"""Half a second of retries at the node, then its failover nodes."""


@pytest.mark.system
@pytest.mark.timeout(300)
@pytest_twisted.ensureDeferred
async def test_a_kill_9_sends_the_clients_through_a_redirect_to_the_backup(nodes, tmp_path, spark):
    started, ports = await three_members(nodes, tmp_path)
    a, b, c = started["a"], started["b"], started["c"]
    url_a = f"tcp://127.0.0.1:{ports['a']}"
    run_dir = tmp_path / "run"
    writers = [events.EventWriter(run_dir, "cluster", name) for name in ("producer", "consumer")]
    received: list[tuple[int, bool]] = []

    def on_message(message: ReceivedMessage) -> None:
        received.append((int(message.headers[events.TRACE_SEQ]), message.redelivered))
        message.ack()

    reader = await connect(reactor, url_a, reconnect=FOLLOW, trace=writers[1])
    await reader.consumer("orders", on_message=on_message)
    writer = await connect(reactor, url_a, reconnect=FOLLOW, trace=writers[0])
    await eventually(lambda: writer.topology is not None and reader.topology is not None)
    assert writer.topology is not None
    assert [m.node_id for m in writer.topology.members] == ["a", "b"]
    settled: list[ClientError | None] = []
    producing = Deferred.fromCoroutine(produce_traced(writer, settled, received, COUNT, LEAD))
    try:
        await eventually(lambda: len(settled) >= KILL_AFTER, timeout=120)
        live = c.wait_for(r"node c: LIVE, epoch 2", SLACK)
        redirected = b.wait_for(
            r"node b: client \S+ asks for store a: redirected to "
            rf"tcp://127\.0\.0\.1:{ports['c']}",
            SLACK,
        )
        await a.stop(signal.SIGKILL)
        assert len(settled) < COUNT, "the producer finished before the kill: raise COUNT"
        await live
        await redirected
        await producing
        await eventually(lambda: len(settled) == COUNT, timeout=120)
        assert settled == [None] * COUNT, [error for error in settled if error][:3]
        await eventually(lambda: len({seq for seq, _ in received}) == COUNT, timeout=120)
        assert (writer.node_name, reader.node_name) == ("c", "c")
        assert str(writer.url) == f"tcp://127.0.0.1:{ports['c']}"
        # c's map, kept by the clients: c and b, on two hosts
        assert [m.node_id for m in writer.topology.members] == ["b", "c"]
    finally:
        await writer.close()
        await reader.close()
        for each in writers:
            await deferToThread(each.close)

    check_failover(await deferToThread(audit, spark, run_dir), COUNT, received, frozenset("ac"))


@pytest.mark.system
@pytest.mark.timeout(240)
@pytest_twisted.ensureDeferred
async def test_a_drop_shorter_than_the_retry_window_keeps_the_client_on_its_node(
    nodes, tmp_path: Path
):
    started, ports = await three_members(nodes, tmp_path)
    b = started["b"]
    patient = ReconnectPolicy(0.1, 1.0, 0.1, reconnect_attempts=int(SLACK / 0.1))
    client = await connect(reactor, f"tcp://127.0.0.1:{ports['b']}", reconnect=patient)
    try:
        assert client.node_name == "b"
        client.send_nowait("orders", b"before", duplicate_id=b"before")
        await b.stop(signal.SIGKILL)
        shared = tmp_path / "store-a"
        restarted = nodes(member("b", ports, shared), name="b")
        await restarted.wait_started(SLACK)
        await client.send("orders", b"after", duplicate_id=b"after")
        assert client.node_name == "b"
        assert "asks for store b" not in started["a"].output
    finally:
        await client.close()
