"""STOMP frames, sans-IO: bytes in, events out (h11 style), and frames back to bytes.

The parser is fed bytes with ``feed`` and asked for one event at a time with
``next_event``: a :class:`Frame`, a :class:`HeartBeat` (an end of line between frames) or
:data:`NEED_DATA`. Pulling one event at a time lets the session stop parsing while it
waits (for a login, a queue being stored) and switch the header escaping when a version is
negotiated, with the bytes after the CONNECT frame still unparsed.

What the parser accepts, per the STOMP 1.2 specification and the older versions:
lines end in ``\\n`` or ``\\r\\n``; a ``content-length`` header gives the body's length
(the body may then hold NULs), otherwise the body ends at the first NUL; header values
are UTF-8; from 1.1 on, ``\\n``, ``\\c`` and ``\\\\`` (and from 1.2 ``\\r``) are escapes, any
other backslash sequence is an error; CONNECT and CONNECTED frames are never escaped.
Every size is bounded (:class:`Limits`): a frame that would exceed one is refused as soon
as that is known, before its bytes arrive, so a hostile peer costs at most its limits.

Large bodies: once a version is negotiated, a SEND whose ``content-length`` is at least
``Limits.min_large`` is not held whole: the parser gives its head as a
:class:`LargeFrame`, then its body as :class:`BodyChunk` events as the bytes arrive (the
last one flagged once the closing NUL is there), so the session can write it to a file
and memory does not grow with the body. Such a body may reach ``Limits.max_large``; any
other body, ``Limits.max_body``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from enum import StrEnum

import attrs


class Command(StrEnum):
    """Every STOMP command, client and server."""

    CONNECT = "CONNECT"
    STOMP = "STOMP"
    SEND = "SEND"
    SUBSCRIBE = "SUBSCRIBE"
    UNSUBSCRIBE = "UNSUBSCRIBE"
    ACK = "ACK"
    NACK = "NACK"
    BEGIN = "BEGIN"
    COMMIT = "COMMIT"
    ABORT = "ABORT"
    DISCONNECT = "DISCONNECT"
    CONNECTED = "CONNECTED"
    MESSAGE = "MESSAGE"
    RECEIPT = "RECEIPT"
    ERROR = "ERROR"


CLIENT_COMMANDS = frozenset(
    {
        Command.CONNECT,
        Command.STOMP,
        Command.SEND,
        Command.SUBSCRIBE,
        Command.UNSUBSCRIBE,
        Command.ACK,
        Command.NACK,
        Command.BEGIN,
        Command.COMMIT,
        Command.ABORT,
        Command.DISCONNECT,
    }
)
SERVER_COMMANDS = frozenset({Command.CONNECTED, Command.MESSAGE, Command.RECEIPT, Command.ERROR})
_UNESCAPED_COMMANDS = frozenset({Command.CONNECT, Command.STOMP, Command.CONNECTED})


class Version(StrEnum):
    """The protocol versions, in the order of preference."""

    V1_0 = "1.0"
    V1_1 = "1.1"
    V1_2 = "1.2"


@attrs.define(slots=True)
class Frame:
    """One STOMP frame. ``headers`` keeps every header in order, repeats included; the
    first of a repeated header is the one that counts (``header``). (Not frozen: two
    are made for every message a node passes on, and a frozen class's ``__init__`` costs
    three times as much. Nothing changes one once made.)"""

    command: Command
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def header_map(self) -> dict[str, str]:
        """The headers as a dict, the first of a repeated header winning."""
        return dict(reversed(self.headers))


@attrs.frozen(slots=True)
class HeartBeat:
    """An end of line between frames: the peer is alive."""


@attrs.frozen(slots=True)
class LargeFrame:
    """The head of a frame whose ``length`` bytes of body follow as BodyChunk events."""

    command: Command
    headers: tuple[tuple[str, str], ...]
    length: int

    def header_map(self) -> dict[str, str]:
        """The headers as a dict, the first of a repeated header winning."""
        return dict(reversed(self.headers))


@attrs.frozen(slots=True)
class BodyChunk:
    """The next bytes of a large frame's body; ``last`` once the body and its NUL are in
    (the last chunk may be empty)."""

    data: bytes
    last: bool


class NeedData:
    """No whole event in the bytes fed so far."""

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData()
HEART_BEAT = HeartBeat()
Event = Frame | HeartBeat | LargeFrame | BodyChunk


@attrs.frozen
class Limits:
    """The most a peer may send in one frame."""

    max_body: int = 4 * 1024 * 1024
    """The largest body held whole (every body that is not streamed)."""
    max_headers: int = 1000
    max_header_bytes: int = 64 * 1024
    """The command and header lines together."""
    min_large: int | None = 100 * 1024
    """A SEND's ``content-length`` from which its body is streamed (None: never)."""
    max_large: int = 128 * 1024 * 1024
    """The largest streamed body."""


class FrameError(Exception):
    """The bytes are not a STOMP frame this node accepts. ``message`` is short (for an
    ERROR frame's header), ``detail`` says more (for its body)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(f"{message}: {detail}" if detail else message)
        self.message = message
        self.detail = detail or message


_LF = 0x0A
_CR = 0x0D
_HEAD_END = re.compile(rb"\n\r?\n")
_MAX_DIGITS = 19
"""The longest content-length read (ASCII digits only: ``isdigit`` alone takes others)."""
_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)
_UNESCAPES_11 = {"n": "\n", "c": ":", "\\": "\\"}
_UNESCAPES_12 = {**_UNESCAPES_11, "r": "\r"}
_ESCAPES_11 = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c"})
_ESCAPES_12 = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"})


def _unescaping(version: Version, table: dict[str, str]) -> Callable[[str], str]:
    """The unescape function of a version: an undefined escape is a FrameError."""

    def replace(match: re.Match[str]) -> str:
        found = table.get(match.group(1))
        if found is None:
            raise FrameError(
                "malformed header",
                f"{_shown(match.group(0))} is not an escape sequence of STOMP {version}",
            )
        return found

    def unescape(text: str) -> str:
        return _ESCAPE.sub(replace, text) if "\\" in text else text

    return unescape


def _shown(data: bytes | str, limit: int = 40) -> str:
    """A short, printable rendering of what a peer sent, for an error message."""
    text = repr(data[:limit])
    return text + ("..." if len(data) > limit else "")


_unescape_11 = _unescaping(Version.V1_1, _UNESCAPES_11)
_unescape_12 = _unescaping(Version.V1_2, _UNESCAPES_12)


_Head = tuple[Command, tuple[tuple[str, str], ...], int | None]
"""A frame's command, headers and content-length (None without one)."""


@attrs.frozen
class _LastHead:
    """A parser's last head as it was parsed, and under which version and limits."""

    head: bytes
    version: Version | None
    limits: Limits
    parsed: _Head
    streamed: bool


class FrameParser:
    """Bytes to events, one event per ``next_event`` call."""

    def __init__(
        self,
        limits: Limits | None = None,
        commands: Iterable[Command] = CLIENT_COMMANDS,
        version: Version | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.version = version
        """The negotiated version (None before CONNECT: headers are read unescaped)."""
        self._commands = {command.value: command for command in commands}
        self._buffer = bytearray()
        self._pos = 0
        self._scan = 0
        """Where the search for the end of the headers or body goes on from."""
        self._head: _Head | None = None
        self._stream_left: int | None = None
        """Body bytes of the streamed frame still to come (None: not streaming)."""
        self._head_streamed = False
        """Whether the last head parsed with a content-length is a streamed frame's."""
        self._read: bytes | None = None
        """A read fed while a streamed body's bytes were due and nothing was buffered: its
        body bytes are handed on as they are, not copied into the buffer and out again."""
        self._last: _LastHead | None = None

    @property
    def buffered(self) -> int:
        """Bytes fed and not yet returned as events."""
        return len(self._buffer) - self._pos + (len(self._read) if self._read else 0)

    @property
    def missing(self) -> int:
        """Bytes still to come of the body begun (with its NUL); 0 between frames and
        while a frame's headers come in."""
        left = self._stream_left
        if left is None:
            head = self._head
            if head is None or head[2] is None:
                return 0
            left = head[2]
        return max(0, left + 1 - self.buffered)

    def discard(self) -> None:
        """Let go of every byte fed and not yet returned, at once (the connection is
        closing; nothing of it will be parsed)."""
        self._buffer = bytearray()
        self._pos = self._scan = 0
        self._head = None
        self._read = None

    def feed(self, data: bytes) -> None:
        if self._pos and self._pos == len(self._buffer):
            self._buffer.clear()
            self._scan -= self._pos
            self._pos = 0
        if self._read is not None:
            self._buffer += self._read
            self._read = None
        elif self._stream_left and not self._buffer and data:
            self._read = data
            return
        self._buffer += data

    def next_event(self) -> Event | NeedData:
        """The next whole event, or NEED_DATA; FrameError if the bytes break the rules."""
        if self._stream_left is not None:
            return self._stream()
        if self._head is None:
            event = self._start()
            if event is not None:
                return event
            if self._head is None:
                return self._need_data()
        return self._body()

    def _need_data(self) -> NeedData:
        if self._pos > 64 * 1024:
            del self._buffer[: self._pos]
            self._scan -= self._pos
            self._pos = 0
        return NEED_DATA

    def _start(self) -> HeartBeat | LargeFrame | None:
        """A heart-beat, a streamed frame's head, or the frame's headers parsed into
        ``_head`` (None either way when more bytes are needed)."""
        buffer, pos = self._buffer, self._pos
        if pos >= len(buffer):
            return None
        first = buffer[pos]
        if first == _LF:
            self._pos = self._scan = pos + 1
            return HEART_BEAT
        if first == _CR:
            if pos + 1 >= len(buffer):
                return None
            if buffer[pos + 1] != _LF:
                raise FrameError("malformed frame", "a carriage return not followed by a line feed")
            self._pos = self._scan = pos + 2
            return HEART_BEAT
        limit = self.limits.max_header_bytes
        end = _HEAD_END.search(buffer, max(pos, self._scan))
        if end is None:
            if len(buffer) - pos > limit:
                raise self._headers_too_long()
            self._scan = max(pos, len(buffer) - 2)
            return None
        stop = end.start()
        if stop - pos > limit:
            raise self._headers_too_long()
        self._head = self._parsed_head(buffer[pos:stop])
        self._pos = self._scan = end.end()
        command, headers, length = self._head
        if length is not None and self._head_streamed:
            self._head = None
            self._stream_left = length
            return LargeFrame(command, headers, length)
        return None

    def _streamed(self, command: Command, length: int) -> bool:
        """Whether a frame's body of ``length`` bytes is streamed: a SEND's, at least
        ``min_large``, once a version is negotiated (after CONNECT)."""
        least = self.limits.min_large
        return (
            least is not None
            and length >= least
            and command is Command.SEND
            and self.version is not None
        )

    def _stream(self) -> BodyChunk | NeedData:
        """The streamed body's bytes that are here, or its end once its NUL is."""
        left = self._stream_left
        assert left is not None
        read = self._read
        if read is not None:
            self._read = None
            if len(read) <= left:
                self._stream_left = left - len(read)
                return BodyChunk(read, False)
            self._buffer += memoryview(read)[left:]  # (the NUL and the frames after it)
            self._pos = self._scan = 0
            self._stream_left = 0
            self._end_stream()
            return BodyChunk(read[:left], True)
        buffer, pos = self._buffer, self._pos
        available = len(buffer) - pos
        if not available:
            return self._need_data()
        if not left:
            self._end_stream()
            return BodyChunk(b"", True)
        take = min(left, available)
        with memoryview(buffer) as view:  # one copy: bytes(buffer[a:b]) makes two
            data = view[pos : pos + take].tobytes()
        self._pos = self._scan = pos + take
        self._stream_left = left - take
        if self._stream_left == 0 and available > take:
            self._end_stream()
            return BodyChunk(data, True)
        return BodyChunk(data, False)

    def _end_stream(self) -> None:
        if self._buffer[self._pos] != 0:
            raise FrameError(
                "malformed frame",
                "the body that content-length announced is not followed by a NUL",
            )
        self._pos = self._scan = self._pos + 1
        self._stream_left = None

    def _headers_too_long(self) -> FrameError:
        return FrameError(
            "frame headers too long",
            f"the command and headers of a frame may take at most "
            f"{self.limits.max_header_bytes} bytes",
        )

    def _parsed_head(self, head: bytearray) -> _Head:
        """The head parsed, or the last head's parse again where the bytes, the version
        and the limits are the same: a producer's SENDs to one destination with the
        same headers (no receipt) have the same head, and parsing it took over two
        fifths of the parser's time per frame (7.7 µs a 1 KiB SEND, 4.4 without)."""
        last = self._last
        if (
            last is not None
            and last.head == head
            and last.version is self.version
            and last.limits is self.limits
        ):
            self._head_streamed = last.streamed
            return last.parsed
        parsed = self._parse_head(head)
        self._last = _LastHead(bytes(head), self.version, self.limits, parsed, self._head_streamed)
        return parsed

    def _parse_head(self, head: bytearray) -> _Head:
        """A frame's command and headers: the head decoded at once (one copy of it), then
        split as text."""
        try:
            whole = head.decode("utf-8")
        except UnicodeDecodeError:
            raise self._bad_head(bytes(head)) from None
        name, _, text = whole.partition("\n")
        command = self._commands.get(name.removesuffix("\r"))
        if command is None:
            raise self._unknown(name.encode())
        lines = text.split("\n") if text else []
        if len(lines) > self.limits.max_headers:
            raise FrameError(
                "too many headers",
                f"{command} frame has {len(lines)} headers; at most "
                f"{self.limits.max_headers} are accepted",
            )
        unescape = self._unescaper(command) if "\\" in text else None
        headers = []
        length: int | None = None
        for line in lines:
            key, colon, value = line.removesuffix("\r").partition(":")
            if not colon:
                raise FrameError("malformed header", f"header line {_shown(line)} has no colon")
            if unescape is not None:
                key, value = unescape(key), unescape(value)
            if key == "content-length" and length is None:
                length = self._length(value, command)
            headers.append((key, value))
        return command, tuple(headers), length

    @staticmethod
    def _unknown(name: bytes) -> FrameError:
        return FrameError("unknown command", f"{_shown(name)} is not a STOMP client command")

    def _bad_head(self, head: bytes) -> FrameError:
        """A head that is not UTF-8: an unknown command, or which header line is not."""
        name, _, rest = head.partition(b"\n")
        try:
            known = name.removesuffix(b"\r").decode("utf-8") in self._commands
        except UnicodeDecodeError:
            known = False
        return self._not_utf8(rest) if known else self._unknown(name)

    @staticmethod
    def _not_utf8(head: bytes) -> FrameError:
        """Which line of the head is not UTF-8."""
        for line in head.split(b"\n"):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return FrameError("header not UTF-8", f"header line {_shown(line)} is not UTF-8")
        return FrameError("header not UTF-8", "the headers are not UTF-8")

    def _length(self, value: str, command: Command) -> int:
        if not (value.isascii() and value.isdigit() and len(value) <= _MAX_DIGITS):
            raise FrameError(
                "malformed content-length", f"content-length {_shown(value)} is not a number"
            )
        length = int(value)
        limits = self.limits
        streamed = self._head_streamed = self._streamed(command, length)
        limit = limits.max_large if streamed else limits.max_body
        if length > limit:
            raise self._body_too_long(length, limit)
        return length

    def _body_too_long(self, length: int | None = None, limit: int | None = None) -> FrameError:
        size = f"of {length} bytes " if length is not None else ""
        return FrameError(
            "frame too large",
            f"a frame body {size}exceeds the limit of {limit or self.limits.max_body} bytes",
        )

    def _unescaper(self, command: Command) -> Callable[[str], str] | None:
        version = self.version
        if version is None or version is Version.V1_0 or command in _UNESCAPED_COMMANDS:
            return None
        return _unescape_12 if version is Version.V1_2 else _unescape_11

    def _body(self) -> Frame | NeedData:
        assert self._head is not None
        command, headers, length = self._head
        buffer, pos = self._buffer, self._pos
        if length is not None:
            end = pos + length
            if len(buffer) <= end:
                return self._need_data()
            if buffer[end] != 0:
                raise FrameError(
                    "malformed frame",
                    f"the {length} bytes of body that content-length announced are not "
                    "followed by a NUL",
                )
        else:
            end = buffer.find(0, self._scan)
            if end < 0:
                if len(buffer) - pos > self.limits.max_body:
                    raise self._body_too_long()
                self._scan = len(buffer)
                return self._need_data()
            if end - pos > self.limits.max_body:
                raise self._body_too_long(end - pos)
        body = bytes(buffer[pos:end]) if end > pos else b""
        self._head = None
        self._pos = self._scan = end + 1
        return Frame(command, headers, body)


def _escaper(version: Version, command: Command) -> Callable[[str], str]:
    if command in _UNESCAPED_COMMANDS or version is Version.V1_0:
        return _check_plain
    return _escape_11 if version is Version.V1_1 else _escape_12


def _escape_12(text: str) -> str:
    # Most headers need no escape: four substring tests cost less than one translate.
    if "\\" in text or ":" in text or "\n" in text or "\r" in text:
        return text.translate(_ESCAPES_12)
    return text


def _check_plain(text: str) -> str:
    if "\n" in text or "\r" in text:
        raise ValueError(f"{text!r}: a line break cannot be sent in this header")
    return text


def _escape_11(text: str) -> str:
    if "\r" in text:
        raise ValueError(f"{text!r}: STOMP 1.1 has no way to send a carriage return")
    if "\\" in text or ":" in text or "\n" in text:
        return text.translate(_ESCAPES_11)
    return text


def encodable(version: Version, key: str, value: str) -> bool:
    """Whether a header can be sent in ``version`` (1.0 escapes nothing, 1.1 no ``\\r``)."""
    if version is Version.V1_2:
        return True
    if version is Version.V1_1:
        return "\r" not in key and "\r" not in value
    return not any(c in key for c in ":\r\n") and "\n" not in value and "\r" not in value


def serialize(frame: Frame, version: Version) -> list[bytes]:
    """The frame's bytes, as parts to write (the body is not copied). The caller sets
    ``content-length`` when the body may hold a NUL.

    In 1.2, a head whose only colons and line feeds are the ones between names and values
    and between lines, with no backslash or carriage return, needs no escape: it is
    written as it is (a MESSAGE frame's head costs a third as much)."""
    headers = frame.headers
    if version is Version.V1_2:
        # (a Command is a str: joined as it is, without the Python call of ``.value``;
        # each header a pair of str, joined by a colon in C)
        text = "\n".join([frame.command, *map(":".join, headers)])
        count = len(headers)
        if (
            text.count(":") == count
            and text.count("\n") == count
            and "\\" not in text
            and "\r" not in text
        ):
            head, body = (text + "\n\n").encode("utf-8"), frame.body
            return [head, body, b"\0"] if body else [head + b"\0"]  # (``with_body``, written out)
    escape = _escaper(version, frame.command)
    lines = [frame.command.value]
    for key, value in headers:
        if version is Version.V1_0 and ":" in key:
            raise ValueError(f"{key!r}: STOMP 1.0 has no way to send a colon in a header name")
        lines.append(f"{escape(key)}:{escape(value)}")
    lines.append("\n")
    return with_body("\n".join(lines).encode("utf-8"), frame.body)


def with_body(head: bytes, body: bytes) -> list[bytes]:
    """A serialized head (its blank line included) and ``body`` as parts to write, with
    the closing NUL; the body is not copied."""
    if body:
        return [head, body, b"\0"]
    return [head + b"\0"]


def serialize_head(frame: Frame, version: Version) -> bytes:
    """The frame's command and headers and the blank line after them: what goes before a
    body sent on its own (then the body, then a NUL)."""
    return b"".join(serialize(attrs.evolve(frame, body=b""), version))[:-1]


def serialize_bytes(frame: Frame, version: Version) -> bytes:
    """The frame as one bytes object (for tests and transcripts)."""
    return b"".join(serialize(frame, version))
