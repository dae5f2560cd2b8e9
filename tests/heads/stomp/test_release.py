"""A closed STOMP connection lets go of what it held at once: with the cycle collector
off, its protocol, session and parser (with the bytes of its partial frame) are freed as
soon as it is gone, whichever side ended it."""

from __future__ import annotations

import weakref

import pytest
import pytest_twisted

from tests.heads.conftest import eventually
from transport.partial import PartialFrameBudget, PartialFrameLimits

PARTIAL = 512 * 1024
BUDGET = 2 * PARTIAL


@pytest.mark.parametrize("ended_by", ["peer", "node"])
@pytest_twisted.ensureDeferred
async def test_a_closed_stomp_connection_is_freed_without_the_cycle_collector(
    make_node, no_cycle_collector, ended_by
):
    budget = PartialFrameBudget(BUDGET)
    node = await make_node(partial_frames=PartialFrameLimits(budget=budget, timeout=None))
    refs = []
    for _ in range(5):
        client = await node.raw()
        assert (await client.connect()).command == "CONNECTED"
        # No content-length: the body is held in memory up to its NUL (one with a large
        # content-length would be streamed to the large-message store instead).
        client.write(b"SEND\ndestination:/queue/x\n\n" + b"x" * PARTIAL)

        def holding():
            return [c for c in node.head._live if c._parser.buffered >= PARTIAL]

        await eventually(lambda: bool(holding()))
        [protocol] = holding()
        refs += [
            weakref.ref(protocol),
            weakref.ref(protocol._session),
            weakref.ref(protocol._parser),
        ]
        del protocol
        if ended_by == "peer":
            await client.close()
        else:  # more than the budget: the node closes it, naming the budget
            client.write(b"x" * PARTIAL * 2)
            error = await client.error()
            assert error.header("message") == "partial-frame budget exhausted"
        node.raw_clients.remove(client)
        await eventually(lambda: node.head.connections == 0)
        await eventually(lambda: not node.head._cleanups)
        assert budget.used == 0
    assert [ref() for ref in refs if ref() is not None] == []
