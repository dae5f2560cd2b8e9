"""Helpers of the flow-control and large-message system tests: a node's ``/status`` and
``/metrics`` read from outside, polled with a bounded deadline; resident memory sampled
while a test runs; and a large body generated on the fly from a file-like object, so that
neither the producer nor the check of what arrived holds it in memory."""

from __future__ import annotations

import io
import json
import random
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from twisted.internet import reactor
from twisted.internet.task import LoopingCall, deferLater
from twisted.internet.threads import deferToThread

from tests.system.nodes import NodeProcess

KIB = 1024
MIB = 1024 * KIB
POLL_INTERVAL = 0.05


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        body: bytes = response.read()
        return body


async def status(node: NodeProcess) -> dict[str, Any]:
    """The node's ``/status`` (read in a thread, so the reactor keeps serving clients)."""
    body = await deferToThread(_get, node.management_url + "/status")
    document: dict[str, Any] = json.loads(body)
    return document


async def metrics(node: NodeProcess) -> str:
    body = await deferToThread(_get, node.management_url + "/metrics")
    return body.decode()


def address_of(document: dict[str, Any], name: str) -> dict[str, Any]:
    """One address's entry of a ``/status`` document."""
    for address in document["addresses"]:
        if address["name"] == name:
            return dict(address)
    raise AssertionError(f"no address {name!r} in /status: {document['addresses']}")


def queue_of(document: dict[str, Any], name: str) -> dict[str, Any]:
    for queue in document["queues"]:
        if queue["name"] == name:
            return dict(queue)
    raise AssertionError(f"no queue {name!r} in /status: {document['queues']}")


async def poll(
    node: NodeProcess,
    condition: Callable[[dict[str, Any]], bool],
    what: str,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Read ``/status`` until ``condition`` holds for it; fail naming ``what`` (and the last
    document) after ``timeout`` seconds. Observing a node from outside has no event to
    wait on, so this polls, with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        document = await status(node)
        if condition(document):
            return document
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout}s; last /status: {document}")
        await deferLater(reactor, POLL_INTERVAL, lambda: None)


def rss(pid: int, field: str = "VmRSS") -> int:
    """A size from ``/proc/PID/status`` (``VmRSS`` now, ``VmHWM`` the peak), in bytes."""
    with open(f"/proc/{pid}/status") as lines:
        for line in lines:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * KIB
    raise AssertionError(f"no {field} in /proc/{pid}/status")


class RssSampler:
    """Samples processes' resident memory on the reactor every few milliseconds while a
    test runs: the baseline at ``start``, the peak since. Sampling, rather than the
    kernel's peak (VmHWM), because the test process's own peak includes earlier tests."""

    def __init__(self, pids: dict[str, int], interval: float = 0.02) -> None:
        self.pids = pids
        self.interval = interval
        self.baseline: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self._loop = LoopingCall(self.sample)
        self._loop.clock = reactor

    def start(self) -> RssSampler:
        self.baseline = {name: rss(pid) for name, pid in self.pids.items()}
        self.peak = dict(self.baseline)
        self._loop.start(self.interval, now=False)
        return self

    def sample(self) -> None:
        for name, pid in self.pids.items():
            self.peak[name] = max(self.peak[name], rss(pid))

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()
        self.sample()

    def growth(self, name: str) -> int:
        """Peak minus baseline, in bytes."""
        return self.peak[name] - self.baseline[name]

    def describe(self) -> str:
        return ", ".join(
            f"{name} {self.baseline[name] / MIB:.1f} -> peak {self.peak[name] / MIB:.1f} MiB"
            for name in self.pids
        )


PAGE = 64 * KIB
_BASE = random.Random(5).randbytes(PAGE)


def pattern_page(number: int) -> bytes:
    """Page ``number`` of a pattern body: its number, then fixed random bytes, so a page
    that is lost, repeated or out of place shows."""
    return number.to_bytes(8, "big") + _BASE[8:]


class PatternFile(io.RawIOBase):
    """A seekable, read-only binary file of ``size`` bytes made of ``pattern_page``s,
    generated as it is read: a large body that no one holds in memory."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def read(self, size: int = -1) -> bytes:
        end = self.size if size < 0 else min(self.size, self.position + size)
        parts = []
        position = self.position
        while position < end:
            number, offset = divmod(position, PAGE)
            take = min(PAGE - offset, end - position)
            parts.append(pattern_page(number)[offset : offset + take])
            position += take
        self.position = position
        return b"".join(parts)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def check_pattern(file: io.IOBase | Any, size: int) -> None:
    """Fail unless ``file`` holds exactly the ``size`` bytes of ``PatternFile(size)``,
    reading both a page at a time."""
    expected = PatternFile(size)
    file.seek(0)
    position = 0
    while True:
        got = file.read(PAGE)
        if not got:
            break
        want = expected.read(len(got))
        if got != want:
            raise AssertionError(f"the body differs from the pattern in the page at {position}")
        position += len(got)
    assert position == size, f"the body has {position} bytes, not {size}"
