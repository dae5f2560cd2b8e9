"""A send whose body arrives in chunks (``bridge.node.large_sends``), without a reactor or
a store: a broker double hands out body writers that keep the chunks in memory, or fail."""

from __future__ import annotations

import errno

import pytest

from bridge.message import LargeBody, Message
from bridge.node.broker import NodeError, NotStored
from bridge.node.large_sends import LargeSend


class _Body:
    """A body writer that keeps what it is given, or fails after ``room`` bytes."""

    def __init__(self, room: int) -> None:
        self.name = "body-7"
        self.data = b""
        self.room = room
        self.state = "open"

    def write(self, data: bytes) -> None:
        if len(self.data) + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.data += data

    def finish(self) -> LargeBody:
        self.state = "finished"
        return LargeBody(self.name, len(self.data))

    def abort(self) -> None:
        self.state = "aborted"


class _Broker:
    def __init__(self, room: int = 1 << 20, opens: bool = True) -> None:
        self.bodies: list[_Body] = []
        self.room = room
        self.opens = opens

    def new_body(self, message_id: int) -> _Body:
        if not self.opens:
            raise OSError(errno.EACCES, "Permission denied", "large/7.body")
        self.bodies.append(_Body(self.room))
        return self.bodies[-1]


HEADER = Message(7, "orders", True, {}, b"")


def _send(broker: _Broker, size: int) -> LargeSend:
    large = LargeSend(HEADER, size)
    large.open(broker)  # type: ignore[arg-type]
    return large


def test_the_chunks_become_the_messages_stored_body() -> None:
    broker = _Broker()
    large = _send(broker, 6)
    large.write(b"abc")
    large.write(b"def")
    message = large.finish()
    assert message.large == LargeBody("body-7", 6) and message.id == 7
    assert broker.bodies[0].data == b"abcdef" and broker.bodies[0].state == "finished"


def test_chunks_that_do_not_add_up_are_refused_and_the_body_goes() -> None:
    broker = _Broker()
    large = _send(broker, 10)
    large.write(b"abcde")
    with pytest.raises(NodeError, match="declared 10 bytes but its chunks held 5"):
        large.finish()
    assert broker.bodies[0].state == "aborted"
    longer = _send(broker, 2)
    longer.write(b"abc")  # counted, not written past what was declared
    assert broker.bodies[1].data == b""
    with pytest.raises(NodeError, match="declared 2 bytes but its chunks held 3"):
        longer.finish()


def test_a_failed_write_drops_the_body_at_once_and_refuses_the_send_at_its_end() -> None:
    broker = _Broker(room=4)
    large = _send(broker, 6)
    large.write(b"abc")
    large.write(b"def")
    assert broker.bodies[0].state == "aborted"  # its room given back now
    assert large.failure == (
        "large message to 'orders' not stored: writing its body to body-7 failed: "
        "No space left on device"
    )
    large.write(b"")  # the rest is counted, not kept
    with pytest.raises(NotStored, match="not stored"):
        large.finish()


def test_a_body_that_cannot_be_opened_names_its_file() -> None:
    large = _send(_Broker(opens=False), 6)
    assert large.failure is not None and "large/7.body failed: Permission denied" in large.failure


def test_a_discarded_send_aborts_its_body() -> None:
    broker = _Broker()
    large = _send(broker, 6)
    large.write(b"abc")
    large.discard()
    large.discard()  # once is enough
    assert broker.bodies[0].state == "aborted"
