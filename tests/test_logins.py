"""The node's logins: at most max-concurrent-hashes hashing, max-queued-logins waiting, the
rest refused at once as busy; a host's failed logins delay (never refuse) its next login."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from bridge.logins import Logins
from security import AuthenticationFailed, SecurityAuth, SecurityStore, Subject, load_security
from security.audit import AUDIT_LOGGER_NAME
from security.errors import LoginsBusy
from tests.security.helpers import write_users

HOST = "203.0.113.9:41000"


@attrs.define
class Threads:
    """Stands for the worker threads: a test says when each login's hash runs."""

    started: list[tuple[Callable[[SecurityAuth], Subject], SecurityAuth, Deferred[Subject]]] = (
        attrs.Factory(list)
    )

    def __call__(
        self, function: Callable[[SecurityAuth], Subject], auth: SecurityAuth
    ) -> Deferred[Subject]:
        result: Deferred[Subject] = Deferred()
        self.started.append((function, auth, result))
        return result

    def finish(self, index: int = 0) -> None:
        function, auth, result = self.started.pop(index)
        try:
            subject = function(auth)
        except AuthenticationFailed as failed:
            result.errback(failed)
        else:
            result.callback(subject)


def store(tmp_path: Path, clock: Clock, **extra: object) -> SecurityStore:
    users = write_users(
        tmp_path / "users.toml", {"alice": ("alice-pw", ["p"]), "bob": ("bob-pw", ["c"])}
    )
    table = {"users-file": str(users), **extra}
    return SecurityStore(load_security(table, str(tmp_path / "node.toml")), clock.seconds)


def outcome(deferred: Deferred[Subject]) -> list[Subject | Failure]:
    seen: list[Subject | Failure] = []
    deferred.addBoth(seen.append)
    return seen


def test_at_most_the_limit_hash_and_beyond_the_queue_logins_are_refused_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock, threads = Clock(), Threads()
    security = store(tmp_path, clock, **{"max-concurrent-hashes": 2, "max-queued-logins": 3})
    logins = Logins(clock, security, threads)
    caplog.set_level(logging.WARNING, logger=AUDIT_LOGGER_NAME)
    results = [
        outcome(logins.authenticate(SecurityAuth("alice", "alice-pw", (), HOST, "core")))
        for _ in range(7)
    ]
    assert (len(threads.started), logins.hashing, logins.queued) == (2, 2, 3)
    assert results[:5] == [[]] * 5
    for refused in results[5:]:
        [failure] = refused
        assert isinstance(failure, Failure)
        assert failure.check(LoginsBusy)
        assert str(failure.value) == (
            "the node is busy with other logins (2 hashing, 3 waiting); try again later"
        )
    busy = [r.getMessage() for r in caplog.records if "outcome=busy" in r.getMessage()]
    assert (
        busy
        == [f"user=alice remote={HOST} protocol=core action=login outcome=busy hashing=2 queued=3"]
        * 2
    )
    # As each hash ends, the first one waiting takes its place: never more than two.
    threads.finish()
    assert (len(threads.started), logins.hashing, logins.queued) == (2, 2, 2)
    while threads.started:
        threads.finish()
        assert logins.hashing <= 2
    assert [[s.user for s in r] for r in results[:5]] == [["alice"]] * 5
    assert (logins.hashing, logins.queued) == (0, 0)


def test_a_failed_hash_frees_its_place_too(tmp_path: Path) -> None:
    clock, threads = Clock(), Threads()
    security = store(tmp_path, clock, **{"max-concurrent-hashes": 1})
    logins = Logins(clock, security, threads)
    wrong = outcome(logins.authenticate(SecurityAuth("alice", "nope", (), HOST, "core")))
    right = outcome(logins.authenticate(SecurityAuth("bob", "bob-pw", (), HOST, "core")))
    threads.finish()
    [failure] = wrong
    assert isinstance(failure, Failure) and failure.check(AuthenticationFailed)
    threads.finish()
    assert [s.user for s in right] == ["bob"]  # type: ignore[union-attr]


def test_a_host_with_failed_logins_waits_its_delay_then_logs_in(tmp_path: Path) -> None:
    clock, threads = Clock(), Threads()
    security = store(
        tmp_path,
        clock,
        **{"failed-login-address-threshold": 2, "failed-login-address-max-delay": "4s"},
    )
    logins = Logins(clock, security, threads)
    for n in range(6):  # an attacker tries many users from the host
        guess = outcome(logins.authenticate(SecurityAuth(f"user{n}", "x", (), HOST, "core")))
        clock.advance(security.login_delay(HOST))
        threads.finish()
        assert guess and isinstance(guess[0], Failure)
    assert security.login_delay(HOST) == 4  # capped
    # The real user of that host is slowed down, not locked out.
    bob = outcome(logins.authenticate(SecurityAuth("bob", "bob-pw", (), HOST, "core")))
    assert threads.started == []  # waiting on the clock: no thread is held
    clock.advance(3.9)
    assert threads.started == []
    clock.advance(0.1)
    threads.finish()
    assert [s.user for s in bob] == ["bob"]  # type: ignore[union-attr]
    # Another host is not slowed at all.
    other = outcome(logins.authenticate(SecurityAuth("bob", "bob-pw", (), "198.51.100.1:5", "x")))
    threads.finish()
    assert [s.user for s in other] == ["bob"]  # type: ignore[union-attr]


def test_without_security_logins_are_answered_at_once(tmp_path: Path) -> None:
    clock, threads = Clock(), Threads()
    security = SecurityStore(
        load_security({"enabled": False}, str(tmp_path / "node.toml")), clock.seconds
    )
    logins = Logins(clock, security, threads)
    [subject] = outcome(logins.authenticate(SecurityAuth("anyone", None, (), HOST, "core")))
    assert isinstance(subject, Subject) and subject.user == "anyone"
    assert threads.started == []


def test_a_cancelled_waiting_login_leaves_the_queue_and_never_hashes(tmp_path: Path) -> None:
    clock, threads = Clock(), Threads()
    security = store(tmp_path, clock, **{"max-concurrent-hashes": 1, "max-queued-logins": 2})
    logins = Logins(clock, security, threads)
    first = outcome(logins.authenticate(SecurityAuth("alice", "alice-pw", (), HOST, "core")))
    gone = logins.authenticate(SecurityAuth("bob", "bob-pw", (), HOST, "core"))
    last = outcome(logins.authenticate(SecurityAuth("bob", "bob-pw", (), HOST, "core")))
    assert (logins.hashing, logins.queued) == (1, 2)
    gone.addErrback(lambda failure: failure.trap(CancelledError))
    gone.cancel()  # its connection closed
    assert (logins.hashing, logins.queued) == (1, 1)
    threads.finish()
    assert [s.user for s in first] == ["alice"]  # type: ignore[union-attr]
    assert [auth.user for _, auth, _ in threads.started] == ["bob"]  # the last one, only
    threads.finish()
    assert [s.user for s in last] == ["bob"]  # type: ignore[union-attr]
    assert (logins.hashing, logins.queued, threads.started) == (0, 0, [])


def test_a_cancelled_running_hash_keeps_its_place_until_it_ends(tmp_path: Path) -> None:
    clock, threads = Clock(), Threads()
    security = store(tmp_path, clock, **{"max-concurrent-hashes": 1})
    logins = Logins(clock, security, threads)
    running = logins.authenticate(SecurityAuth("alice", "alice-pw", (), HOST, "core"))
    waiting = outcome(logins.authenticate(SecurityAuth("bob", "bob-pw", (), HOST, "core")))
    cancelled = outcome(running)
    running.cancel()
    [failure] = cancelled
    assert isinstance(failure, Failure) and failure.check(CancelledError)
    # The thread cannot be stopped: the hash still counts, and bob still waits.
    assert (logins.hashing, logins.queued, len(threads.started)) == (1, 1, 1)
    threads.finish()  # its answer is dropped; bob's turn
    assert (logins.hashing, logins.queued, len(threads.started)) == (1, 0, 1)
    threads.finish()
    assert [s.user for s in waiting] == ["bob"]  # type: ignore[union-attr]


def test_a_cancelled_delayed_login_never_queues(tmp_path: Path) -> None:
    clock, threads = Clock(), Threads()
    security = store(tmp_path, clock, **{"failed-login-address-threshold": 1})
    logins = Logins(clock, security, threads)
    failed = logins.authenticate(SecurityAuth("alice", "wrong", (), HOST, "core"))
    failed.addErrback(lambda failure: failure.trap(AuthenticationFailed))
    threads.finish()
    assert security.login_delay(HOST) > 0
    delayed = logins.authenticate(SecurityAuth("alice", "alice-pw", (), HOST, "core"))
    assert not threads.started  # waiting out the host's delay
    delayed.addErrback(lambda failure: failure.trap(CancelledError))
    delayed.cancel()
    clock.advance(60)
    assert (threads.started, logins.hashing, logins.queued) == ([], 0, 0)
