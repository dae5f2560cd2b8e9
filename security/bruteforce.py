"""Slowing down password guessing: failed logins per remote host earn a growing refusal.

Sans-IO: nothing sleeps. The store asks :meth:`LoginGuard.refusal` before checking
credentials and refuses while a host is in its back-off window.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import attrs


@attrs.frozen
class BackoffPolicy:
    """``threshold`` failures in a row are free; each further failure refuses the host
    for ``initial_delay * multiplier ** k`` seconds (k = 0, 1, ...), at most ``max_delay``.
    A success resets the count; so does ``max_delay`` without failures.
    """

    threshold: int = 3
    initial_delay: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 300.0
    max_hosts: int = 10_000

    def window(self, failures: int) -> float:
        """Seconds of refusal after ``failures`` failures in a row."""
        excess = failures - self.threshold
        if excess < 0:
            return 0.0
        if self.multiplier > 1 and excess > 64:
            return self.max_delay
        return float(min(self.initial_delay * self.multiplier**excess, self.max_delay))


def remote_host(remote_address: str) -> str:
    """The host of ``host:port``, ``[v6]:port`` or a bare host."""
    if remote_address.startswith("["):
        return remote_address[1:].partition("]")[0]
    if remote_address.count(":") == 1:
        return remote_address.rpartition(":")[0]
    return remote_address


@attrs.define
class _Record:
    failures: int
    last_failure: float
    refused_until: float


class LoginGuard:
    """Counts failed logins per host and says when a host must be refused."""

    def __init__(self, policy: BackoffPolicy, clock: Callable[[], float]) -> None:
        self.policy = policy
        self._clock = clock
        self._hosts: OrderedDict[str, _Record] = OrderedDict()

    def __len__(self) -> int:
        return len(self._hosts)

    def failures(self, host: str) -> int:
        record = self._current(host)
        return record.failures if record else 0

    def _current(self, host: str) -> _Record | None:
        record = self._hosts.get(host)
        if record is not None and self._clock() - record.last_failure >= self.policy.max_delay:
            del self._hosts[host]  # quiet long enough: forgiven
            return None
        return record

    def refusal(self, host: str) -> float | None:
        """Seconds ``host`` stays refused, or None if it may try now."""
        record = self._current(host)
        if record is None:
            return None
        left = record.refused_until - self._clock()
        return left if left > 0 else None

    def failed(self, host: str) -> float:
        """Count a failure; return the refusal window it starts (0 if none)."""
        now = self._clock()
        record = self._current(host)
        if record is None:
            record = self._hosts[host] = _Record(0, now, now)
        record.failures += 1
        record.last_failure = now
        window = self.policy.window(record.failures)
        record.refused_until = now + window
        self._hosts.move_to_end(host)
        while len(self._hosts) > self.policy.max_hosts:
            self._hosts.popitem(last=False)
        return window

    def succeeded(self, host: str) -> None:
        self._hosts.pop(host, None)
