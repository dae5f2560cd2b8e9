"""Connection settings: water marks, frame size limit, heartbeats and the TTL."""

from __future__ import annotations

import attrs

from transport.frames import DEFAULT_MAX_FRAME_SIZE, LENGTH_LIMIT
from transport.outbound import DEFAULT_HIGH_WATER, DEFAULT_LOW_WATER, check_water_marks
from transport.partial import PartialFrameLimits
from transport.stream import StreamSettings


@attrs.frozen
class ConnectionSettings:
    """How one framed connection behaves.

    ``heartbeat_interval``: send a ping this often (unless bytes are already waiting to
    leave), so a peer hears from this side at least once an interval.
    ``ttl``: disconnect a peer from which nothing arrived for this long (Artemis's
    connection-ttl); time with reading paused by this side does not count. It must be at
    least twice the peer's heartbeat interval, so one late ping is not a death sentence.
    ``io_size``: bytes read or sent per socket call (Twisted's transport buffer size, which
    is also where Twisted pauses a connection handing it bytes); None keeps Twisted's own.
    ``read_size``: bytes read per socket call, if not ``io_size``. Every whole frame of a
    read is handled before the reactor turns to another connection, so a server with many
    connections reads less at a time: its peers' credits and acknowledgements then wait
    behind about a millisecond of one busy producer's sends, not several.
    ``flush_budget``: about the most bytes handed to the transport in one pass (the part
    that crosses it goes too), so the transport has a chance to push back before it holds
    more (default: the high water mark).
    ``tcp_no_delay``: send small frames at once (``TCP_NODELAY``), not after the peer's
    delayed acknowledgement of the last one (see ``transport.wire.tune_socket_io``).
    ``partial_frames``: how an accepting side bounds the frames it has not received whole (the
    pre-login frame size, the frame timeout, the node-wide budget: see
    ``transport.partial``); None: only ``max_frame_size``, from the first frame on.
    """

    high_water: int = DEFAULT_HIGH_WATER
    low_water: int = DEFAULT_LOW_WATER
    max_frame_size: int = attrs.field(default=DEFAULT_MAX_FRAME_SIZE)
    heartbeat_interval: float | None = 30.0
    ttl: float | None = 60.0
    flush_budget: int | None = None
    io_size: int | None = 256 * 1024
    read_size: int | None = None
    tcp_no_delay: bool = True
    partial_frames: PartialFrameLimits | None = None

    @max_frame_size.validator
    def _check_max_frame(self, attribute: attrs.Attribute[int], value: int) -> None:
        if not 0 < value <= LENGTH_LIMIT:
            raise ValueError(f"max_frame_size must be 1..{LENGTH_LIMIT}, got {value}")

    def __attrs_post_init__(self) -> None:
        for name in ("io_size", "read_size"):
            size = getattr(self, name)
            if size is not None and size < 4096:
                raise ValueError(f"{name} must be at least 4096 bytes, got {size}")
        for name in ("heartbeat_interval", "ttl"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive or None, got {value}")
        check_water_marks(self.high_water, self.low_water)
        if (
            self.ttl is not None
            and self.heartbeat_interval is not None
            and self.heartbeat_interval * 2 > self.ttl
        ):
            raise ValueError(
                f"heartbeat_interval ({self.heartbeat_interval}s) must be at most half the "
                f"ttl ({self.ttl}s), or a quiet peer is dropped between its pings"
            )

    @property
    def ttl_check(self) -> float | None:
        """How often the TTL is checked: a peer is dropped within 1.25 TTLs of silence."""
        return self.ttl / 4 if self.ttl is not None else None

    @property
    def budget(self) -> int:
        return self.flush_budget or self.high_water

    @property
    def stream(self) -> StreamSettings:
        """The socket and buffering part, for the connection machinery beneath
        (``transport.stream``); a closing connection is ended by its TTL."""
        return StreamSettings(
            high_water=self.high_water,
            low_water=self.low_water,
            budget=self.budget,
            io_size=self.io_size,
            read_size=self.read_size,
            tcp_no_delay=self.tcp_no_delay,
            partial_frames=self.partial_frames,
        )
