"""Slowing down password guessing: failed logins earn a growing back-off window.

Sans-IO: nothing sleeps. The store keeps two guards: one per (host, user), whose window
refuses that user from that host without checking credentials, and one per host, whose
window (capped much lower) only delays the next login from the host, so that guessing
from one address can never lock the real user out (docs/security.md, the trade-off).
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Hashable

import attrs

from security.clock import Clock


def _default_forget_after(policy: BackoffPolicy) -> float:
    return 2 * policy.max_delay


@attrs.frozen
class BackoffPolicy:
    """``threshold`` failures in a row are free; each further failure refuses the host
    for ``initial_delay * multiplier ** k`` seconds (k = 0, 1, ...), at most ``max_delay``.

    A success resets the count; so does ``forget_after`` seconds without failures
    (default twice ``max_delay``). It must be longer than ``max_delay``: forgiving a host
    the moment its longest refusal ends would restart the escalation for a patient
    attacker, who would then never wait longer than ``max_delay``.
    """

    threshold: int = 3
    initial_delay: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 300.0
    max_hosts: int = 10_000
    forget_after: float = attrs.field(default=attrs.Factory(_default_forget_after, takes_self=True))

    @forget_after.validator
    def _check_forget_after(self, _: attrs.Attribute[float], value: float) -> None:
        if value <= self.max_delay:
            raise ValueError(
                f"forget_after ({value:g}s) must be longer than max_delay ({self.max_delay:g}s)"
            )

    def window(self, failures: int) -> float:
        """Seconds of refusal after ``failures`` failures in a row."""
        excess = failures - self.threshold
        if excess < 0:
            return 0.0
        if self.multiplier > 1 and excess > 64:
            return self.max_delay
        return float(min(self.initial_delay * self.multiplier**excess, self.max_delay))


def remote_host(remote_address: str) -> str:
    """The host of a remote address, without the port, so that every connection from one
    host shares one failure count.

    Accepts ``[v6]:port`` (as the transport writes IPv6 peers), ``v4:port``,
    ``name:port`` and bare hosts (``v6`` unbracketed, ``v4``, a name). IP addresses come
    back in canonical form (``2001:DB8:0::1`` is ``2001:db8::1``, and an IPv4-mapped IPv6
    address is its IPv4 address), so spellings of one host do not count apart.
    """
    text = remote_address.strip()
    if text.startswith("["):
        host = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        host = text.partition(":")[0]
    else:
        host = text  # a bare IPv6 address (several colons) or a bare host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


@attrs.define
class _Record:
    failures: int
    last_failure: float
    refused_until: float


@attrs.define
class LoginGuard:
    """Counts failed logins per key (a host, or a host and a user) and says how long a
    key stays in its back-off window.

    At most ``policy.max_hosts`` keys are remembered (the least recently failed is
    forgotten first). Not thread-safe: the store calls it under its lock.
    """

    policy: BackoffPolicy
    clock: Clock
    _hosts: OrderedDict[Hashable, _Record] = attrs.field(init=False, factory=OrderedDict)

    def __len__(self) -> int:
        return len(self._hosts)

    def failures(self, host: Hashable) -> int:
        """Failed logins in a row from ``host`` that are not yet forgiven."""
        record = self._current(host)
        return record.failures if record else 0

    def _current(self, host: Hashable) -> _Record | None:
        record = self._hosts.get(host)
        if record is not None and self.clock() - record.last_failure >= self.policy.forget_after:
            del self._hosts[host]  # quiet long enough: forgiven
            return None
        return record

    def refusal(self, host: Hashable) -> float | None:
        """Seconds ``host`` stays refused, or None if it may try now."""
        record = self._current(host)
        if record is None:
            return None
        left = record.refused_until - self.clock()
        return left if left > 0 else None

    def failed(self, host: Hashable) -> float:
        """Count a failure; return the refusal window it starts (0 if none)."""
        now = self.clock()
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

    def succeeded(self, host: Hashable) -> None:
        """A login from ``host`` succeeded: its failures are forgiven at once."""
        self._hosts.pop(host, None)
