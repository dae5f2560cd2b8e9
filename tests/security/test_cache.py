"""Caches: bounded, expiring on the injected clock, and emptied by reload."""

from __future__ import annotations

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
    load_security,
)
from security.cache import MISSING, ExpiringCache
from security.config import SecuritySettings
from security.matcher import MatchTable
from tests.security.helpers import FakeClock, write_users


def login(user: str, password: str) -> SecurityAuth:
    return SecurityAuth(user, password, (), "10.0.0.1:4000", "core")


def test_entries_expire_after_the_ttl(clock: FakeClock) -> None:
    cache: ExpiringCache[str, int] = ExpiringCache(10, 5.0, clock)
    cache.put("a", 1)
    clock.advance(4.999)
    assert cache.get("a") == 1
    clock.advance(0.001)
    assert cache.get("a") is MISSING
    assert len(cache) == 0


def test_least_recently_used_goes_first(clock: FakeClock) -> None:
    cache: ExpiringCache[str, int] = ExpiringCache(2, 5.0, clock)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert cache.get("b") is MISSING
    assert (cache.get("a"), cache.get("c")) == (1, 3)


@pytest.mark.parametrize(("size", "ttl"), [(0, 5.0), (10, 0.0)])
def test_zero_size_or_ttl_disables(clock: FakeClock, size: int, ttl: float) -> None:
    cache: ExpiringCache[str, int] = ExpiringCache(size, ttl, clock)
    cache.put("a", 1)
    assert cache.get("a") is MISSING


def change_password(users_file: Path, password: str) -> None:
    write_users(
        users_file,
        {
            "alice": (password, ["producers"]),
            "bob": ("bob-secret", ["consumers"]),
            "root": ("root-secret", ["admins"]),
        },
    )


def test_changed_password_takes_effect_after_the_invalidation_interval(
    settings: SecuritySettings, clock: FakeClock, users_file: Path
) -> None:
    assert settings.invalidation_interval == 10.0
    store = SecurityStore(settings, clock)
    store.authenticate(login("alice", "alice-secret"))
    change_password(users_file, "changed")
    clock.advance(9.9)
    # Still cached: the old password works, the new one is not known yet.
    store.authenticate(login("alice", "alice-secret"))
    clock.advance(0.1)
    with pytest.raises(AuthenticationFailed):
        store.authenticate(login("alice", "alice-secret"))
    store.authenticate(login("alice", "changed"))


def test_changed_password_takes_effect_at_once_after_reload(
    settings: SecuritySettings, clock: FakeClock, users_file: Path
) -> None:
    store = SecurityStore(settings, clock)
    store.authenticate(login("alice", "alice-secret"))
    change_password(users_file, "changed")
    store.reload()
    with pytest.raises(AuthenticationFailed):
        store.authenticate(login("alice", "alice-secret"))
    store.authenticate(login("alice", "changed"))


@implementer(IAuthenticator)
class CountingAuthenticator:
    """Knows one user; counts how often it is asked (a stand-in for a slow hash)."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0
        self.reloads = 0

    def authenticate(self, auth: ISecurityAuth) -> Identity | None:
        self.calls += 1
        if (auth.user, auth.password) == ("u", "pw"):
            return Identity("u", frozenset({"r"}), AuthMethod.PASSWORD)
        return None

    def reload(self) -> None:
        self.reloads += 1


def counting_store(
    tmp_path: Path, clock: FakeClock, **extra: object
) -> tuple[SecurityStore, CountingAuthenticator]:
    users = write_users(tmp_path / "users.toml", {})
    table = {"users-file": str(users), "setting": [{"match": "a.#", "send": ["r"]}], **extra}
    counting = CountingAuthenticator()
    store = SecurityStore(load_security(table, str(tmp_path / "n.toml")), clock, counting)
    return store, counting


def test_successful_and_failed_logins_are_cached(tmp_path: Path, clock: FakeClock) -> None:
    store, counting = counting_store(tmp_path, clock, **{"failed-login-threshold": 100})
    for _ in range(3):
        store.authenticate(login("u", "pw"))
    assert counting.calls == 1
    for _ in range(3):
        with pytest.raises(AuthenticationFailed):
            store.authenticate(login("u", "wrong"))
    assert counting.calls == 2
    clock.advance(10)
    store.authenticate(login("u", "pw"))
    assert counting.calls == 3


def test_authentication_cache_size_bounds_it(tmp_path: Path, clock: FakeClock) -> None:
    store, counting = counting_store(tmp_path, clock, **{"authentication-cache-size": 1})
    store.authenticate(login("u", "pw"))
    with pytest.raises(AuthenticationFailed):
        store.authenticate(login("u", "other"))
    store.authenticate(login("u", "pw"))
    assert counting.calls == 3


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Addresses looked up in any store's pattern table: a check the cache did not answer."""
    seen: list[str] = []
    original = MatchTable.lookup

    def counting_lookup(self: MatchTable[object], address: str, queue: str | None = None) -> object:
        seen.append(address)
        return original(self, address, queue)

    monkeypatch.setattr(MatchTable, "lookup", counting_lookup)
    return seen


def test_explicit_reload_empties_both_caches(
    tmp_path: Path, clock: FakeClock, lookups: list[str]
) -> None:
    store, counting = counting_store(tmp_path, clock)
    who = store.authenticate(login("u", "pw"))
    store.check(who, "a.b", Permission.SEND)
    store.check(who, "a.b", Permission.SEND)
    assert lookups == ["a.b"]
    store.reload()
    assert counting.reloads == 1
    store.authenticate(login("u", "pw"))
    assert counting.calls == 2
    store.check(who, "a.b", Permission.SEND)
    assert lookups == ["a.b", "a.b"]


def test_invalidate_caches_empties_both_caches(
    tmp_path: Path, clock: FakeClock, lookups: list[str]
) -> None:
    store, counting = counting_store(tmp_path, clock)
    who = store.authenticate(login("u", "pw"))
    store.check(who, "a.b", Permission.SEND)
    store.authenticate(login("u", "pw"))
    store.check(who, "a.b", Permission.SEND)
    assert (counting.calls, lookups) == (1, ["a.b"])
    store.invalidate_caches()
    assert counting.reloads == 0  # nothing is read again: only the caches are emptied
    store.authenticate(login("u", "pw"))
    store.check(who, "a.b", Permission.SEND)
    assert (counting.calls, lookups) == (2, ["a.b", "a.b"])


def test_authorization_decisions_are_cached_until_the_interval(
    tmp_path: Path, clock: FakeClock, lookups: list[str]
) -> None:
    store, _ = counting_store(tmp_path, clock)
    who = store.authenticate(login("u", "pw"))
    for _ in range(3):
        store.check(who, "a.b", Permission.SEND)
    assert lookups == ["a.b"]
    clock.advance(10)
    store.check(who, "a.b", Permission.SEND)
    assert lookups == ["a.b", "a.b"]


def test_authorization_cache_size_bounds_it(
    tmp_path: Path, clock: FakeClock, lookups: list[str]
) -> None:
    store, _ = counting_store(tmp_path, clock, **{"authorization-cache-size": 2})
    who = store.authenticate(login("u", "pw"))
    for address in ("a.1", "a.2", "a.1", "a.2"):
        store.check(who, address, Permission.SEND)
    assert lookups == ["a.1", "a.2"]  # two decisions fit
    store.check(who, "a.3", Permission.SEND)  # a third evicts the least recently used
    store.check(who, "a.2", Permission.SEND)
    store.check(who, "a.3", Permission.SEND)
    assert lookups == ["a.1", "a.2", "a.3"]
    store.check(who, "a.1", Permission.SEND)
    assert lookups == ["a.1", "a.2", "a.3", "a.1"]


def test_authorization_cache_off(tmp_path: Path, clock: FakeClock, lookups: list[str]) -> None:
    store, _ = counting_store(tmp_path, clock, **{"authorization-cache-size": 0})
    who = store.authenticate(login("u", "pw"))
    for _ in range(3):
        store.check(who, "a.b", Permission.SEND)
    assert lookups == ["a.b"] * 3
