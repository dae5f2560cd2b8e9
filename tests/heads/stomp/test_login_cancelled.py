"""A connection that closes while its login waits for a hash cancels that login, on the
core head and the STOMP head alike, so that a flood of logins that hang up costs no hash
(``bridge.logins`` drops a cancelled login from its queue)."""

from __future__ import annotations

from typing import Any

import pytest_twisted
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from bridge.heads.core.session import CoreSession
from bridge.heads.stomp import StompSettings
from bridge.heads.stomp.frames import Command, Frame
from bridge.heads.stomp.session import StompSession
from bridge.protocol import packets as p
from tests.heads.stomp.test_ack_machine import FrameSink


class HangingLogin:
    """An authenticate that never answers; records whether it was cancelled."""

    def __init__(self) -> None:
        self.cancelled = False
        self.asked = 0

    def __call__(self, auth: Any) -> Deferred[Any]:
        self.asked += 1
        return Deferred(lambda _: setattr(self, "cancelled", True))


@pytest_twisted.ensureDeferred
async def test_a_core_connection_lost_while_logging_in_cancels_its_login(stomp_node):
    login = HangingLogin()
    session = CoreSession(
        stomp_node.broker,
        stomp_node.head.security,
        node_name="a",
        node_id="id",
        clock=Clock(),
        emit=lambda packet: None,
        abort=lambda reason: None,
        authenticate=login,
    )
    session.packet_received(p.Connect(p.PROTOCOL_VERSION, "c", "alice", "pw", 1 << 20))
    assert (login.asked, login.cancelled) == (1, False)
    await session.connection_lost()
    assert login.cancelled


@pytest_twisted.ensureDeferred
async def test_a_stomp_connection_lost_while_logging_in_cancels_its_login(stomp_node):
    login = HangingLogin()
    wire = FrameSink()
    session = StompSession(
        stomp_node.broker,
        stomp_node.head.security,
        wire,
        clock=Clock(),
        authenticate=login,
        settings=StompSettings(ttl=None, heart_beat=None),
    )
    session.event_received(
        Frame(Command.CONNECT, (("accept-version", "1.2"), ("login", "alice"), ("passcode", "x")))
    )
    assert (login.asked, login.cancelled) == (1, False)
    await session.connection_lost()
    assert login.cancelled
    assert wire.frames == []  # nothing answered the closed connection
