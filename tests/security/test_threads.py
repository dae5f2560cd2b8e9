"""The store from several threads: heads hash passwords in worker threads (deferToThread)
while the reactor thread checks permissions, and reloads come in between."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from zope.interface import implementer

from security import (
    AuthenticationFailed,
    AuthMethod,
    IAuthenticator,
    Identity,
    ISecurityAuth,
    Permission,
    SecurityAuth,
    SecurityStore,
    Subject,
    load_security,
)
from tests.security.helpers import FakeClock, write_users

USERS = {f"user{n}": (f"secret-{n}", [f"role{n % 3}"]) for n in range(6)}
ATTEMPTS = 1500
TIMEOUT = 10.0


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Switch threads as often as the interpreter can, so races show up in a short run."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


class ContendedClock(FakeClock):
    """A test clock that lingers when read, letting other threads run, and notes whether
    two threads ever read it at once.

    The store reads its clock only while it touches the caches or the brute-force counts,
    so overlapping reads mean two threads were inside that shared state together; the
    lingering makes such overlaps (and the races they cause) likely rather than rare.
    """

    def __init__(self) -> None:
        super().__init__()
        self._inside = 0
        self._count_lock = threading.Lock()
        self.overlaps = 0

    def __call__(self) -> float:
        with self._count_lock:
            self._inside += 1
            if self._inside > 1:
                self.overlaps += 1
        try:
            time.sleep(0.00005)
            return self.now
        finally:
            with self._count_lock:
                self._inside -= 1


def login(user: str, password: str, n: int) -> SecurityAuth:
    return SecurityAuth(user, password, (), f"10.{n % 7}.0.{n % 200}:{40000 + n}", "core")


def expected(n: int) -> tuple[str, str, str | None]:
    """Attempt ``n``: user, password, and the user it logs in as (None: it fails)."""
    user = f"user{n % len(USERS)}"
    kind = n % 4
    if kind == 0:
        return user, f"wrong-{n}", None
    if kind == 1:
        return f"stranger{n % 5}", "secret-1", None
    return user, USERS[user][0], user


def test_concurrent_authentications_with_expiries_and_reloads(
    tmp_path: Path, busy_switching: None
) -> None:
    clock = ContendedClock()
    users = write_users(tmp_path / "users.toml", USERS)
    table = {
        "users-file": str(users),
        "security-invalidation-interval": "1s",
        "authentication-cache-size": 5,  # smaller than the logins in play: evictions too
        "authorization-cache-size": 3,
        "failed-login-threshold": 1_000_000,  # no refusals: every answer is predictable
        "setting": [{"match": "orders.#", "send": ["role0", "role1"]}],
    }
    store = SecurityStore(load_security(table, str(tmp_path / "node.toml")), clock)
    done = threading.Event()

    def attempt(n: int) -> str | None:
        user, password, _ = expected(n)
        try:
            subject = store.authenticate(login(user, password, n))
        except AuthenticationFailed:
            return None
        assert subject.roles == {USERS[subject.user][1][0]}
        may_send = subject.roles & {"role0", "role1"}
        try:
            store.check(subject, f"orders.{n % 4}", Permission.SEND)
        except Exception:
            assert not may_send
        else:
            assert may_send
        return subject.user

    def meddle() -> int:
        # Expire entries, empty the caches and reload while the logins go on.
        rounds = 0
        while not done.is_set():
            clock.advance(0.4)
            if rounds % 3 == 0:
                store.invalidate_caches()
            if rounds % 5 == 0:
                store.reload()
            rounds += 1
        return rounds

    with ThreadPoolExecutor(max_workers=12) as pool:
        meddler = pool.submit(meddle)
        try:
            futures: list[Future[str | None]] = [pool.submit(attempt, n) for n in range(ATTEMPTS)]
            results = [future.result(timeout=TIMEOUT) for future in futures]
        finally:
            done.set()  # else a failure would leave the meddler (and the test) running
        assert meddler.result(timeout=TIMEOUT) > 0
    assert results == [expected(n)[2] for n in range(ATTEMPTS)]
    assert clock.overlaps == 0


@implementer(IAuthenticator)
class GatedAuthenticator:
    """Logs in anyone with password "pw"; the user "slow" waits at a gate, as a long
    password hash would, so a test can act while a login is in the middle of hashing."""

    name = "gated"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.calls: list[str | None] = []

    def authenticate(self, auth: ISecurityAuth) -> Identity | None:
        self.calls.append(auth.user)
        if auth.user == "slow":
            self.entered.set()
            assert self.gate.wait(TIMEOUT), "the test never opened the gate"
        if auth.password != "pw" or auth.user is None:
            return None
        return Identity(auth.user, frozenset({"r"}), AuthMethod.PASSWORD)

    def reload(self) -> None:
        pass


@pytest.fixture
def gated(tmp_path: Path, clock: FakeClock) -> tuple[SecurityStore, GatedAuthenticator]:
    users = write_users(tmp_path / "users.toml", {})
    table = {"users-file": str(users), "setting": [{"match": "a.#", "send": ["r"]}]}
    authenticator = GatedAuthenticator()
    store = SecurityStore(load_security(table, str(tmp_path / "n.toml")), clock, authenticator)
    return store, authenticator


def test_no_lock_is_held_while_a_password_is_hashed(
    gated: tuple[SecurityStore, GatedAuthenticator],
) -> None:
    store, authenticator = gated
    fast = SecurityAuth("fast", "pw", (), "10.0.0.2:1", "core")
    store.authenticate(fast)  # now cached
    subject = Subject("fast", frozenset({"r"}), AuthMethod.PASSWORD, "core")
    with ThreadPoolExecutor(max_workers=2) as pool:
        slow = pool.submit(store.authenticate, SecurityAuth("slow", "pw", (), "10.0.0.1:1"))
        assert authenticator.entered.wait(TIMEOUT)

        def meanwhile() -> str:
            store.check(subject, "a.b", Permission.SEND)  # the reactor's checks go on
            who = store.authenticate(fast)  # cached logins are answered
            with pytest.raises(AuthenticationFailed):
                store.authenticate(SecurityAuth("other", "bad", (), "10.0.0.3:1"))
            store.invalidate_caches()
            store.reload()
            return who.user

        # Had the store kept its lock while "slow" hashes, this would time out.
        assert pool.submit(meanwhile).result(timeout=TIMEOUT) == "fast"
        assert not slow.done()
        authenticator.gate.set()
        assert slow.result(timeout=TIMEOUT).user == "slow"


def test_a_login_checked_across_a_reload_is_not_cached(
    gated: tuple[SecurityStore, GatedAuthenticator],
) -> None:
    store, authenticator = gated
    slow = SecurityAuth("slow", "pw", (), "10.0.0.1:1")
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(store.authenticate, slow)
        assert authenticator.entered.wait(TIMEOUT)
        store.reload()  # say the users file changed: the answer on its way may be stale
        authenticator.gate.set()
        assert pending.result(timeout=TIMEOUT).user == "slow"
    store.authenticate(slow)
    assert authenticator.calls == ["slow", "slow"]  # asked again, not answered by the cache
    store.authenticate(slow)
    assert authenticator.calls == ["slow", "slow"]
