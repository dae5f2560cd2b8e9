"""``[store] bridge-confirm-wait``: a durable send on a queue that only a bridge consumes
is not written on the source node when the target confirms it in time; its producer
is answered once the target has it."""

from __future__ import annotations

import time
from typing import Any

import pytest_twisted

from bridge.forward.status import BridgeState
from tests.forward.conftest import Nodes, bridge_config, eventually, receive_all

ANYCAST = {"address": [{"name": "orders", "routing": "anycast"}]}


def adds_written(node: Any) -> list[int]:
    """The ids of the messages ``node``'s store writer adds from now on."""
    written: list[int] = []
    writer = node.broker.store._writer
    run = writer.run

    def recording(operations: Any) -> Any:
        written.extend(op.message_id for op in operations if type(op).__name__ == "AddMessage")
        return run(operations)

    writer.run = recording
    return written


@pytest_twisted.ensureDeferred
async def test_a_send_the_target_confirmed_in_time_is_not_written_on_the_source(
    nodes: Nodes,
) -> None:
    b = await nodes("b", **ANYCAST)
    a = await nodes("a", store={"bridge-confirm-wait": "10s"}, **ANYCAST)
    a.start_bridges(bridge_config("a-to-b", "orders", b.url))
    await eventually(
        lambda: a.bridges is not None and a.bridges.snapshots()[0].state is BridgeState.STARTED
    )
    written = adds_written(a)
    producer = await nodes.client(a)
    for index in range(20):
        await producer.send("orders", b"m%d" % index, {"n": index}, durable=True)
    assert written == []  # each answered once b confirmed it (the wait's end writes it)
    got = await receive_all(await nodes.client(b), "orders", 20)
    assert [m.headers["n"] for m in got] == list(range(20))
    await eventually(lambda: a.depth("orders") == 0)


@pytest_twisted.ensureDeferred
async def test_a_send_no_bridge_takes_is_written_at_once(nodes: Nodes) -> None:
    a = await nodes("a", store={"bridge-confirm-wait": "10s"}, **ANYCAST)
    written = adds_written(a)
    producer = await nodes.client(a)
    started = time.monotonic()
    await producer.send("orders", b"kept", durable=True)
    assert time.monotonic() - started < 5  # not held: the wait is 10 s
    assert len(written) == 1
