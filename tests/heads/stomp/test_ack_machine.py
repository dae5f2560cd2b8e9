"""A STOMP session's acknowledgement bookkeeping as a state machine, on the real broker:
whatever a client-acknowledging subscriber SENDs, ACKs and NACKs (each NACKed message
coming back at once, under the same message-id), every ACK and NACK of a message it holds
is accepted, the session holds exactly what the client holds, and in 1.0 and 1.1 a
message-id names the message's latest delivery."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from twisted.internet.task import Clock
from zope.interface import implementer

from bridge.config.node import DEFAULT_MAX_DELIVERY_ATTEMPTS
from bridge.heads.stomp import StompSettings
from bridge.heads.stomp.frames import SERVER_COMMANDS, Command, Frame, FrameParser, Version
from bridge.heads.stomp.interfaces import IStompTransport
from bridge.heads.stomp.session import StompSession

_QUEUES = itertools.count()


@implementer(IStompTransport)
class FrameSink:
    """The session's connection: keeps the frames it is given."""

    peer = "127.0.0.1:1"
    is_writable = True

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.closed = False

    def send(self, frame: Frame) -> None:
        self.frames.append(frame)

    def send_serialized(self, head: bytes, body: bytes) -> None:
        parser = FrameParser(commands=SERVER_COMMANDS, version=Version.V1_2)
        parser.feed(head + body + b"\0")
        frame = parser.next_event()
        assert isinstance(frame, Frame), frame
        self.frames.append(frame)

    def close(self) -> None:
        self.closed = True

    def pause_reading(self, reason: str) -> None:
        pass

    def resume_reading(self, reason: str) -> None:
        pass

    def set_heart_beats(self, send_every: float | None, silence_limit: float | None) -> None:
        pass

    def peer_certificates(self) -> list[object]:
        return []


def sink_session(node: Any, wire: FrameSink, clock: Any) -> StompSession:
    """A STOMP session on ``node``'s broker and security over ``wire``, without
    heart-beats or a time-to-live."""
    return StompSession(
        node.broker,
        node.head.security,
        wire,
        clock=clock,
        authenticate=node.head.authenticate,
        settings=StompSettings(ttl=None, heart_beat=None),
    )


class AckMachine(RuleBasedStateMachine):
    """One connection, one ``client`` or ``client-individual`` subscription on a queue of
    its own; non-persistent messages, so every step is done when its frame is handled."""

    node: Any
    """The ``stomp_node`` whose broker the machine runs on."""
    version: str
    mode: str

    def __init__(self) -> None:
        super().__init__()
        self.queue = f"acks{next(_QUEUES)}"
        self.wire = FrameSink()
        self.clock = Clock()
        self.session = sink_session(self.node, self.wire, self.clock)
        self.seen = 0
        self.receipts = itertools.count()
        self.held: list[tuple[int, str, int]] = []
        """What the client holds, oldest delivery first: (message-id, how to name it in an
        ACK or NACK, delivery-count)."""
        self.gone = 0
        self._frame("CONNECT", {"accept-version": self.version})
        assert [f.command for f in self._new()] == ["CONNECTED"]
        self._frame(
            "SUBSCRIBE", {"id": "s", "destination": f"/queue/{self.queue}", "ack": self.mode}
        )
        self.subscription = self.session._subscriber.subscriptions["s"]

    def _frame(self, command: str, headers: dict[str, str]) -> None:
        self.session.event_received(Frame(Command(command), tuple(headers.items())))

    def _new(self) -> list[Frame]:
        frames = self.wire.frames[self.seen :]
        self.seen = len(self.wire.frames)
        assert not [f for f in frames if f.command == "ERROR"], frames
        return frames

    def _take_messages(self, frames: list[Frame]) -> list[tuple[int, int]]:
        """Record the MESSAGE frames among ``frames``: (message-id, delivery-count) each."""
        taken = []
        for frame in frames:
            if frame.command != "MESSAGE":
                continue
            message_id = int(frame.header("message-id") or "")
            count = int(frame.header("delivery-count") or "1")
            assert frame.header("redelivered") == ("true" if count > 1 else None)
            name = frame.header("ack") if self.version == "1.2" else str(message_id)
            assert name is not None
            self.held.append((message_id, name, count))
            taken.append((message_id, count))
        return taken

    def _settle(self, command: str, index: int) -> list[tuple[int, str, int]]:
        """ACK or NACK the ``index``-th message held (and, in client mode, every earlier
        one): what that covers, now off ``held``; its RECEIPT came."""
        _, name, _ = self.held[index]
        headers = {"id": name} if self.version == "1.2" else {"message-id": name}
        if self.version == "1.1":
            headers["subscription"] = "s"
        receipt = f"r{next(self.receipts)}"
        covered = self.held[: index + 1] if self.mode == "client" else [self.held[index]]
        self.held = [held for held in self.held if held not in covered]
        self._frame(command, {**headers, "receipt": receipt})
        self.clock.advance(0)
        frames = self._new()
        receipts = [f.header("receipt-id") for f in frames if f.command == "RECEIPT"]
        assert receipts == [receipt]
        self._take_messages(frames)
        return covered

    @rule()
    def send(self) -> None:
        self._frame("SEND", {"destination": f"/queue/{self.queue}"})
        self.clock.advance(0)
        [(_, count)] = self._take_messages(self._new())
        assert count == 1

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.held) - 1))
        self.gone += len(self._settle("ACK", index))

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def nack(self, data: st.DataObject) -> None:
        """Each message NACKed comes back at once, counted once more, under the same
        message-id; one delivered max-delivery-attempts times goes (no dead-letter
        address: dropped)."""
        index = data.draw(st.integers(0, len(self.held) - 1))
        before = len(self.held)
        covered = self._settle("NACK", index)
        again = sorted((m, c) for m, _, c in self.held[before - len(covered) :])
        expected = sorted((m, c + 1) for m, _, c in covered if c < DEFAULT_MAX_DELIVERY_ATTEMPTS)
        assert again == expected
        self.gone += len(covered) - len(again)

    @invariant()
    def the_session_holds_what_the_client_holds(self) -> None:
        subscription = self.subscription
        assert list(subscription.unacked.values()) == [m for m, _, _ in self.held]
        if self.version == "1.2":
            assert not subscription.by_message
        else:
            assert subscription.by_message == {m: d for d, m in subscription.unacked.items()}
        assert self.node.broker.queue(self.queue).depth == len(self.held)

    def teardown(self) -> None:
        self.session.connection_lost()
        self.clock.advance(0)


@pytest.mark.parametrize("mode", ["client", "client-individual"])
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_ack_and_nack_bookkeeping(stomp_node, version, mode):
    machine = type("Machine", (AckMachine,), {"node": stomp_node, "version": version, "mode": mode})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        ),
    )
