"""A closed core connection lets go of what it held at once: with the cycle collector
off, its connection, receiver, session and the bytes of its partial frame are freed as
soon as it is gone, whichever side ended it (nothing of it lives on in a reference cycle,
to be freed only when the cycle collector happens to run)."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from bridge.protocol import packets as p
from tests.heads.conftest import Node, eventually
from transport.frames import HEADER, MAGIC, VERSION
from transport.partial import PartialFrameBudget, PartialFrameLimits
from transport.settings import ConnectionSettings

PARTIAL = 512 * 1024
"""Bytes of a frame each connection sends before it stops (the frame is twice as big)."""
BUDGET = 2 * PARTIAL
"""The node-wide partial-frame budget: a connection that sends three times the partial frame
would exceed it, and the node closes that one."""


@pytest.fixture
def budgeted_node(tmp_path: Any) -> Iterator[Node]:
    budget = PartialFrameBudget(BUDGET)
    settings = ConnectionSettings(partial_frames=PartialFrameLimits(budget=budget, timeout=None))
    node = Node(tmp_path, settings=settings)
    running = pytest_twisted.blockon(Deferred.fromCoroutine(node.start()))
    yield running
    pytest_twisted.blockon(Deferred.fromCoroutine(running.stop()))


@pytest.mark.parametrize("ended_by", ["peer", "node"])
@pytest_twisted.ensureDeferred
async def test_a_closed_core_connection_is_freed_without_the_cycle_collector(
    budgeted_node, no_cycle_collector, ended_by
):
    node = budgeted_node
    refs = []
    for _ in range(5):
        peer = await node.peer()
        assert peer.of(p.Connected)
        header = HEADER.pack(MAGIC, VERSION, p.PacketType.SEND, 4 * PARTIAL)
        peer.connection.transport.write(header + b"x" * PARTIAL)

        def holding():
            return [r for r in node.head._live if r._connection._decoder.buffered >= PARTIAL]

        await eventually(lambda: bool(holding()))
        [receiver] = holding()
        connection = receiver._connection
        lost = connection.when_lost()
        refs += [
            weakref.ref(receiver),
            weakref.ref(connection),
            weakref.ref(receiver._session),
            weakref.ref(connection._decoder),
        ]
        del receiver, connection
        if ended_by == "peer":
            await peer.close()
        else:  # more than the budget: the node closes it, naming the budget
            peer.connection.transport.write(b"x" * PARTIAL * 2)
            assert "partial-frame-budget" in str(await lost)
            await peer.lost
        node.peers.remove(peer)
        await eventually(lambda: node.head.connections == 0)
        await eventually(lambda: not node.head._cleanups)
        assert node.settings.partial_frames.budget.used == 0
    assert [ref() for ref in refs if ref() is not None] == []
