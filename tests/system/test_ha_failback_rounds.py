"""Failback twenty times in a row under load: nodes a (``replication-primary`` with
``allow-failback``) and b (``replication-backup``), each its own SQLite store, the lease in
a PostgreSQL schema. Each round a is killed with SIGKILL, b takes over, a is started
again, copies b's store and, once in sync, b hands the lease back: a is LIVE again with b
its backup in sync. Each round keeps the single failback's order (b stops serving before a
is LIVE, b copies from a only after; never two live nodes), and a producer (durable
messages with duplicate ids) and a consumer (acknowledging) given both nodes' URLs go on
the whole time: every send is confirmed, every message arrives, a repeat comes as a
redelivery."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from bridge.client.api import Client, ReceivedMessage, connect
from bridge.client.errors import ClientError
from tests.forward.conftest import eventually
from tests.postgresql import schema_url
from tests.system.bridges import free_port
from tests.system.ha import PING, REAP, SLACK
from tests.system.replication import ha_status, replicated_node, stamp
from transport.reconnect import ReconnectPolicy

ROUNDS = 20
RATE = 100
"""Sends per second, at most: a small load, so that a round costs little."""
MAX_MESSAGES = 100_000
MAX_SECONDS = 800.0
"""Bounds on the producer, however slow the rounds."""
LEAD = 200
"""The producer keeps at most this many messages ahead of the consumer."""
STEP = 50
"""Confirmed sends awaited before each kill, and again once b serves."""
QUICK = ReconnectPolicy(retry_interval=0.1, retry_interval_multiplier=1.0, max_retry_interval=0.1)
TICK = 0.05


async def _produce(
    client: Client,
    settled: list[ClientError | None],
    received: list[tuple[int, bool]],
    stop: list[bool],
) -> int:
    """Send at most ``RATE`` a second until ``stop`` is set (or a bound): how many were
    sent."""
    seq = 0
    deadline = time.monotonic() + MAX_SECONDS
    while not stop and seq < MAX_MESSAGES and time.monotonic() < deadline:
        for _ in range(round(RATE * TICK)):
            if seq - len(received) > LEAD:
                break
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
        await deferLater(reactor, TICK, lambda: None)
    return seq


async def _confirmed(settled: list[ClientError | None], count: int = STEP) -> None:
    """Wait until another ``count`` sends are confirmed."""
    before = len(settled)
    await eventually(lambda: len(settled) >= before + count, timeout=SLACK * 2)


def _check_order(a_output: str, a_live: int, b_output: str, since: int) -> None:
    """The failback's order in this round's lines: b handed the lease over and stopped
    serving before a was LIVE (at ``a_live`` in ``a_output``), began copying from a only
    after, and never came up live again meanwhile."""
    handed = b_output.index("node b: failback: a is in sync, handing the lease over", since)
    stopped = b_output.index("node b: stops serving", handed)
    copying = b_output.index("replica: copying the store of a", stopped)
    assert "node b: LIVE" not in b_output[handed:], "b came back live: the failback broke"
    live_at = stamp(a_output, a_live)
    assert stamp(b_output, stopped) <= live_at, "a was live while b still served"
    assert stamp(b_output, copying) >= live_at, "b copied from a before a was live"


@pytest.mark.system
@pytest.mark.timeout(900)
@pytest_twisted.ensureDeferred
async def test_twenty_failbacks_under_load_lose_nothing(nodes, pg_schema, capsys):
    lease_url = schema_url(pg_schema)
    ports = {"a": free_port(), "b": free_port()}
    a_document = replicated_node(
        "a", "replication-primary", lease_url, ports["a"], ports["b"], **{"allow-failback": True}
    )
    a = nodes(a_document, name="a")
    await a.wait_for(r"node a: LIVE, epoch 1\b", SLACK)
    await a.wait_started(SLACK)
    b = nodes(
        replicated_node("b", "replication-backup", lease_url, ports["b"], ports["a"]), name="b"
    )
    await a.wait_for(r"replication: b/\w+ is in sync .*, named so in the lease", SLACK, since=0)
    urls = [f"tcp://127.0.0.1:{ports[name]}" for name in ("a", "b")]

    received: list[tuple[int, bool]] = []

    def on_message(message: ReceivedMessage) -> None:
        received.append((int(message.headers["seq"]), message.redelivered))
        message.ack()

    reader = await connect(reactor, urls, reconnect=QUICK)
    await reader.consumer("orders", on_message=on_message)
    writer = await connect(reactor, urls, reconnect=QUICK)
    settled: list[ClientError | None] = []
    stop: list[bool] = []
    producing = Deferred.fromCoroutine(_produce(writer, settled, received, stop))
    epochs = [1]
    processes: dict[str, Any] = {"a": a, "b": b}
    try:
        for _ in range(ROUNDS):
            await _confirmed(settled)
            since = len(b.output)
            b_live = b.wait_for(r"node b: LIVE, epoch (\d+)", REAP + PING + SLACK, since=since)
            await a.stop(signal.SIGKILL)
            epochs.append(int((await b_live).group(1)))
            await _confirmed(settled)  # the clients followed to b

            processes["a"] = a = nodes(a_document, name="a")
            a_live = await a.wait_for(r"node a: LIVE, epoch (\d+)", REAP + PING + SLACK * 2)
            epochs.append(int(a_live.group(1)))
            await a.wait_started(SLACK)
            await b.wait_for(
                r"replication: a/\w+ is in sync .*, named so in the lease", SLACK, since=since
            )
            await a.wait_for(
                r"replication: b/\w+ is in sync .*, named so in the lease", SLACK, since=0
            )
            _check_order(a.output, a_live.start(), b.output, since)
        await _confirmed(settled)
        stop.append(True)
        sent = await producing
        await eventually(lambda: len(settled) == sent, timeout=SLACK * 4)
        assert settled == [None] * sent, [error for error in settled if error][:3]
        await eventually(lambda: len({seq for seq, _ in received}) == sent, timeout=SLACK * 4)
        shown = await ha_status(a, capsys)
    except BaseException:
        for name, node in processes.items():
            print(f"--- node {name}\n{node.output[-8000:]}")
        raise
    finally:
        stop.append(True)
        await writer.close()
        await reader.close()

    assert epochs == sorted(set(epochs)), f"the epochs did not always increase: {epochs}"
    assert shown["state"] == "LIVE", shown
    assert shown["replication"]["last_takeover"] == "failback", shown
    assert shown["replication"]["state"] == "in-sync", shown
    seen: set[int] = set()
    for seq, redelivered in received:
        if seq in seen:
            assert redelivered, f"message {seq} came twice, the second time not as a redelivery"
        seen.add(seq)
    assert seen == set(range(sent))
    print(f"\n{ROUNDS} failbacks, {sent} messages, {len(received) - sent} redelivered; {epochs}")
