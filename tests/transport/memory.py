"""An in-memory framed connection for tests where sockets are not the point.

Twisted's StringTransport never pauses a producer by itself, so these tests play
Twisted's part by calling the connection's pauseProducing/resumeProducing directly.
"""

from __future__ import annotations

import attrs
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from zope.interface import implementer

from transport.connection import FrameConnection
from transport.frames import Frame, FrameDecoder
from transport.interfaces import IFrameConnection, IFrameReceiver
from transport.settings import ConnectionSettings

APP = 16


@implementer(IFrameReceiver)
@attrs.define(slots=False)
class Recorder:
    frames: list[Frame] = attrs.Factory(list)
    lost: list[BaseException] = attrs.Factory(list)
    connection: IFrameConnection | None = None

    def connection_made(self, connection: IFrameConnection) -> None:
        self.connection = connection

    def frame_received(self, frame: Frame) -> None:
        self.frames.append(frame)

    def connection_lost(self, reason: BaseException) -> None:
        self.lost.append(reason)


class CountingTransport(StringTransport):
    """Counts writeSequence calls, to check a turn's frames leave together."""

    def __init__(self) -> None:
        super().__init__()
        self.sequences = 0
        self.aborted = False

    def writeSequence(self, data):  # type: ignore[no-untyped-def]
        self.sequences += 1
        super().writeSequence(data)

    def abortConnection(self) -> None:
        self.aborted = True
        super().abortConnection()


@attrs.define
class Wired:
    connection: FrameConnection
    transport: CountingTransport
    receiver: Recorder
    clock: Clock

    def written_frames(self) -> list[Frame]:
        return FrameDecoder([APP], max_frame_size=1 << 30).feed(self.transport.value())

    def turn(self) -> None:
        """End the current reactor turn."""
        self.clock.advance(0)


def wired(clock: Clock | None = None, *, accepting: bool = False, **settings: object) -> Wired:
    """A connection on a memory transport: the connecting side, unless ``accepting`` (whose
    pings, the first at once, ask the peer to ping at a third of its TTL)."""
    clock = clock or Clock()
    receiver = Recorder()
    connection = FrameConnection(
        receiver,
        clock,
        ConnectionSettings(**settings),
        accepted_types=[APP],  # type: ignore[arg-type]
        is_client=not accepting,
    )
    transport = CountingTransport()
    connection.makeConnection(transport)
    return Wired(connection, transport, receiver, clock)


@attrs.define
class Pair:
    """Two connections joined in memory on one clock: what one writes, the other reads."""

    a: Wired
    b: Wired
    clock: Clock

    def pump(self) -> None:
        """End the turn, then carry bytes both ways until nothing is left to carry."""
        moved = True
        while moved:
            self.clock.advance(0)
            moved = False
            for source, target in ((self.a, self.b), (self.b, self.a)):
                data = source.transport.value()
                if data:
                    source.transport.clear()
                    target.connection.dataReceived(data)
                    moved = True

    def run_for(self, seconds: float, step: float) -> None:
        """Let time pass in steps, pumping after each."""
        elapsed = 0.0
        while elapsed < seconds:
            self.clock.advance(step)
            self.pump()
            elapsed += step


def pair(a_settings: dict[str, object], b_settings: dict[str, object]) -> Pair:
    """``a`` connects to ``b``, which accepts."""
    clock = Clock()
    a = wired(clock=clock, **a_settings)
    b = wired(clock=clock, accepting=True, **b_settings)
    return Pair(a, b, clock)
