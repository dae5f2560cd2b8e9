"""``txbridge ctl ha failover`` twenty times in a row under load: nodes a and b share one
store (a PostgreSQL schema, or an SQLite store directory), a producer sends durable
messages with duplicate ids and a consumer acknowledges them the whole time, and the lease
goes back and forth between the nodes. Every send is confirmed, every message arrives,
and a message that arrives twice comes the second time as a redelivery.

As in ``test_ha_failover_audit``, the clients connect to one URL: both nodes are given the
same core port, which the live one binds (a node behind one virtual address)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from bridge.client.api import Client, ReceivedMessage, connect
from bridge.client.errors import ClientError
from bridge.ctl.main import main
from tests.forward.conftest import eventually
from tests.system.bridges import free_port
from tests.system.ha import PING, REAP, SLACK, ha_node
from transport.reconnect import ReconnectPolicy

FAILOVERS = 20
MAX_MESSAGES = 200_000
"""A bound on the producer, however slow the failovers."""
LEAD = 200
"""The producer keeps at most this many messages ahead of the consumer."""
QUICK = ReconnectPolicy(retry_interval=0.1, retry_interval_multiplier=1.0, max_retry_interval=0.1)


async def _produce(
    client: Client,
    settled: list[ClientError | None],
    received: list[tuple[int, bool]],
    stop: list[bool],
) -> int:
    """Send until ``stop`` is set (or the bound): how many were sent."""
    seq = 0
    while not stop and seq < MAX_MESSAGES:
        while seq - len(received) > LEAD and not stop:
            await deferLater(reactor, 0.005, lambda: None)
        if not client.is_writable:
            await client.when_writable()
        client.send_nowait(
            "orders",
            b"%d" % seq,
            {"seq": seq},
            duplicate_id=b"seq-%d" % seq,
            on_settled=settled.append,
        )
        seq += 1
    return seq


async def _under_load(settled: list[ClientError | None]) -> None:
    """Wait until another hundred sends are confirmed."""
    before = len(settled)
    await eventually(lambda: len(settled) >= before + 100, timeout=60)


async def _backups_waiting(management: str, capsys: pytest.CaptureFixture[str]) -> bool:
    """Whether ``ctl ha status`` on the live node lists a backup waiting for the lease."""
    argv = ["ctl", "--url", management, "ha", "status", "--json"]
    assert await deferToThread(main, argv) == 0
    return bool(json.loads(capsys.readouterr().out)["backups"])


async def _next_live(nodes: dict[str, Any], after: int) -> tuple[str, int]:
    """The node that logs LIVE at the first epoch after ``after``, whichever it is, and
    that epoch: an acquire whose answer outlasts lease-query-timeout counts as failed and
    is tried again, though it may have raised the epoch in the database (a loaded
    machine), so the next epoch may be more than one higher."""
    later = "|".join(str(epoch) for epoch in range(after + 1, after + 21))
    pattern = rf"node ([ab]): LIVE, epoch ({later})\b"
    waits = [node.wait_for(pattern, REAP * 2 + PING + SLACK, since=0) for node in nodes.values()]
    result, _ = await DeferredList(
        waits, fireOnOneCallback=True, fireOnOneErrback=False, consumeErrors=True
    )
    for wait in waits:
        if not wait.called:
            wait.cancel()
    if not isinstance(result, re.Match):
        raise AssertionError(f"no node went live after epoch {after}")
    return result.group(1), int(result.group(2))


@pytest.mark.system
@pytest.mark.timeout(600)
@pytest_twisted.ensureDeferred
async def test_twenty_soft_failovers_under_load_lose_nothing(shared_store, nodes, capsys):
    url = shared_store
    port = free_port()  # a port, not 0: each node binds it again whenever it is live
    documents = {
        name: ha_node(name, url, f"shared-store-{role}")
        for name, role in (("a", "primary"), ("b", "backup"))
    }
    for document in documents.values():
        document["acceptor"][0]["url"] = f"tcp://127.0.0.1:{port}"
    a = nodes(documents["a"], name="a")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(SLACK)
    b = nodes(documents["b"], name="b")
    await b.wait_for(r"node b: live is a, epoch 1", SLACK)
    processes = {"a": a, "b": b}
    management = {}
    for name, node in processes.items():
        found = await node.wait_for(rf"node {name}: management on 127\.0\.0\.1:(\d+)", 5, since=0)
        management[name] = f"http://127.0.0.1:{found.group(1)}"

    received: list[tuple[int, bool]] = []

    def on_message(message: ReceivedMessage) -> None:
        received.append((int(message.headers["seq"]), message.redelivered))
        message.ack()

    reader = await connect(reactor, a.core_url, reconnect=QUICK)
    await reader.consumer("orders", on_message=on_message)
    writer = await connect(reactor, a.core_url, reconnect=QUICK)
    settled: list[ClientError | None] = []
    stop: list[bool] = []
    producing = Deferred.fromCoroutine(_produce(writer, settled, received, stop))
    live, epoch, lives = "a", 1, ["a"]
    try:
        for _ in range(FAILOVERS):
            await _under_load(settled)
            # the other node waits for the lease again (a reap after its own hand-over)
            waited = 0.0
            while not await _backups_waiting(management[live], capsys):
                assert waited < REAP * 2 + SLACK, f"no backup waits for {live}'s lease"
                await deferLater(reactor, 0.1, lambda: None)
                waited += 0.1
            asked = deferToThread(main, ["ctl", "--url", management[live], "ha", "failover"])
            assert await asked == 0
            assert capsys.readouterr().out.startswith("failover started")
            live, epoch = await _next_live(processes, epoch)
            lives.append(live)
        await _under_load(settled)
        stop.append(True)
        sent = await producing
        await eventually(lambda: len(settled) == sent, timeout=120)
        assert settled == [None] * sent, [error for error in settled if error][:3]
        await eventually(lambda: len({seq for seq, _ in received}) == sent, timeout=120)
    except BaseException:
        for name, node in processes.items():
            print(f"--- node {name}\n{node.output[-5000:]}")
        raise
    finally:
        stop.append(True)
        await writer.close()
        await reader.close()

    assert len(set(lives)) == 2, lives  # the lease went back and forth
    seen: set[int] = set()
    for seq, redelivered in received:
        if seq in seen:
            assert redelivered, f"message {seq} came twice, the second time not as a redelivery"
        seen.add(seq)
    assert seen == set(range(sent))
    print(f"\n{FAILOVERS} failovers, {sent} messages, {len(received) - sent} redelivered; {lives}")
