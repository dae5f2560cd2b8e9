"""A run of SENDs to one destination within one read is resolved and checked once, as the
core head checks a SEND_MANY's address once; the next read, a frame other than a SEND, or
another destination, is checked again, against the permissions as they are then."""

from __future__ import annotations

from typing import Any

import attrs
import pytest_twisted
from twisted.internet import reactor

from bridge.heads.stomp.frames import Command, Frame
from tests.forward.conftest import eventually
from tests.heads.stomp.test_ack_machine import FrameSink, sink_session


class _Reads:
    """A STOMP session on ``node``'s broker over a frame sink, fed frames a read at a
    time; every check of the send permission is counted by address."""

    def __init__(self, node: Any, monkeypatch: Any) -> None:
        self.wire = FrameSink()
        self.session = sink_session(node, self.wire, reactor)
        self.send_checks: list[str] = []
        security = node.head.security
        check = security.check

        def counted(subject: Any, address: str, permission: Any, queue: Any = None) -> None:
            if str(permission) == "send":
                self.send_checks.append(address)
            check(subject, address, permission, queue)

        monkeypatch.setattr(security, "check", counted)

    def read(self, *frames: tuple[str, dict[str, str]]) -> None:
        """``frames`` as one read hands them to the session."""
        for command, headers in frames:
            self.session.event_received(Frame(Command(command), tuple(headers.items()), b"x"))
        self.session.read_ended()

    def received(self, command: str) -> list[Frame]:
        return [frame for frame in self.wire.frames if frame.command == command]

    async def connect(self, user: str = "alice") -> None:
        """Log in: alice may send to ``orders.#`` only, root anywhere."""
        self.read(
            ("CONNECT", {"accept-version": "1.2", "login": user, "passcode": f"{user}-secret"})
        )
        await eventually(lambda: self.received("CONNECTED"))

    async def receipt(self, receipt: str) -> None:
        await eventually(
            lambda: any(f.header("receipt-id") == receipt for f in self.received("RECEIPT"))
        )


def _send(destination: str, **headers: str) -> tuple[str, dict[str, str]]:
    return ("SEND", {"destination": destination, "persistent": "true", **headers})


@pytest_twisted.ensureDeferred
async def test_a_run_of_sends_in_one_read_is_checked_once(secure_stomp_node, monkeypatch):
    reads = _Reads(secure_stomp_node, monkeypatch)
    await reads.connect()
    reads.read(*[_send("/queue/orders")] * 4, _send("/queue/orders", receipt="r"))
    await reads.receipt("r")
    assert reads.send_checks == ["orders"]
    assert secure_stomp_node.broker.queue("orders").depth == 5
    assert reads.received("ERROR") == []


@pytest_twisted.ensureDeferred
async def test_each_read_and_each_destination_is_checked_again(secure_stomp_node, monkeypatch):
    """A second read, a frame other than a SEND in between, another destination: each
    ends the run, so the SEND after it is checked."""
    reads = _Reads(secure_stomp_node, monkeypatch)
    await reads.connect("root")
    reads.read(_send("/queue/orders"), _send("/queue/jobs"), _send("/queue/orders"))
    reads.read(_send("/queue/orders"))
    reads.read(
        _send("/queue/orders"),
        ("BEGIN", {"transaction": "t"}),
        _send("/queue/orders", receipt="r"),
    )
    await reads.receipt("r")
    assert reads.send_checks == ["orders", "jobs", "orders", "orders", "orders", "orders"]
    assert reads.received("ERROR") == []


@pytest_twisted.ensureDeferred
async def test_the_next_read_meets_the_permissions_as_they_are_then(secure_stomp_node, monkeypatch):
    """alice loses the send permission between two reads: the second read's SEND to the
    same destination is refused, the first read's stay stored."""
    reads = _Reads(secure_stomp_node, monkeypatch)
    await reads.connect()
    reads.read(_send("/queue/orders"), _send("/queue/orders", receipt="r"))
    await reads.receipt("r")
    security = secure_stomp_node.head.security
    settings = security.settings
    kept = [setting for setting in settings.settings if setting.match != "orders.#"]
    security.reload(attrs.evolve(settings, settings=tuple(kept)))
    reads.read(_send("/queue/orders", receipt="refused"))
    await eventually(lambda: reads.received("ERROR"))
    (error,) = reads.received("ERROR")
    assert error.header("message") == "permission denied"
    assert error.body.startswith(b"user 'alice' lacks permission 'send' on address 'orders'")
    assert error.header("receipt-id") == "refused"
    assert secure_stomp_node.broker.queue("orders").depth == 2


@pytest_twisted.ensureDeferred
async def test_a_refused_destination_in_a_run_is_refused_after_an_allowed_one(
    secure_stomp_node, monkeypatch
):
    """alice may send to ``orders`` but not to ``news``: in one read, the SEND to
    ``news`` after those to ``orders`` is refused (and nothing after it is handled)."""
    reads = _Reads(secure_stomp_node, monkeypatch)
    await reads.connect()
    reads.read(
        _send("/queue/orders"), _send("/topic/news"), _send("/queue/orders", receipt="never")
    )
    await eventually(lambda: reads.received("ERROR"))
    (error,) = reads.received("ERROR")
    assert error.body.startswith(b"user 'alice' lacks permission 'send' on address 'news'")
    assert reads.send_checks == ["orders", "news"]
    await eventually(lambda: secure_stomp_node.broker.queue("orders").depth == 1)
    assert reads.received("RECEIPT") == []
