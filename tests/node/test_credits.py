"""Producer credit given back (``bridge.node.credits``): gathered per address over a turn
and given in one grant each, and withheld from an address full under BLOCK until it has
room, then given in one on the turn after. Plain calls and a ``Clock``."""

from __future__ import annotations

import pytest_twisted
from twisted.internet.task import Clock

from bridge.message import Message
from bridge.node.credits import ProducerCredits
from tests.node.test_session import opened, session

__all__ = ["opened"]


def test_a_turns_grants_go_once_per_address(opened) -> None:
    given: list[tuple[str, int]] = []
    credits = ProducerCredits(session(opened, {"producers"}), lambda *grant: given.append(grant))
    credits.grant("orders.in", 100)
    credits.grant("orders.elsewhere", 5)
    credits.grant("orders.in", 20)
    assert credits.gathered and given == []
    credits.flush()
    assert given == [("orders.in", 120), ("orders.elsewhere", 5)]
    assert not credits.gathered


@pytest_twisted.ensureDeferred
async def test_grants_to_an_address_full_under_block_wait_for_room(opened) -> None:
    broker, _ = opened
    clock = Clock()
    node = session(opened, {"producers"}, clock)
    given: list[tuple[str, int]] = []
    credits = ProducerCredits(node, lambda *grant: given.append(grant))
    for n in range(3):
        broker.publish(Message(0, "orders.in", False, {}, b"%0100d" % n))
    credits.grant("orders.in", 100)
    credits.flush()
    credits.grant("orders.in", 50)  # a later turn's grant adds to the withheld one
    credits.flush()
    assert given == [] and node.blocked == 1
    deliveries = []
    broker.consume("orders.in", 1, deliveries.append)
    await broker.acknowledge("orders.in", 1, deliveries[0].delivery_id)
    assert given == []
    clock.advance(0)
    assert given == [("orders.in", 150)] and node.blocked == 0
