"""Brute force: a growing refusal per (host, user), a capped delay per host that never
refuses, the audit log, and no password in logs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from security import (
    AuthenticationFailed,
    BackoffPolicy,
    ConfigError,
    LoginGuard,
    SecurityAuth,
    SecurityStore,
    load_security,
)
from security.audit import AUDIT_LOGGER_NAME
from security.bruteforce import remote_host
from tests.security.helpers import FakeClock, write_users

SECRET = "S3cret-Pa55word!"
GUESS = "gue55-Of-An-Attacker"
BOB_SECRET = "b0b-Pa55word!"


def test_policy_windows_grow_and_stop_at_the_maximum() -> None:
    policy = BackoffPolicy(threshold=3, initial_delay=1.0, multiplier=2.0, max_delay=10.0)
    assert [policy.window(n) for n in range(1, 9)] == [0, 0, 1, 2, 4, 8, 10, 10]
    assert policy.window(10_000) == 10.0


@pytest.mark.parametrize(
    ("remote", "host"),
    [
        ("10.0.0.1:5000", "10.0.0.1"),  # v4:port
        ("10.0.0.1", "10.0.0.1"),  # bare v4
        ("[::1]:5000", "::1"),  # [v6]:port, as the transport writes IPv6 peers
        ("[2001:db8::7]:41000", "2001:db8::7"),
        ("[2001:db8::7]", "2001:db8::7"),  # bracketed, no port
        ("::1", "::1"),  # bare v6, unbracketed: every colon is the address's
        ("2001:db8::7", "2001:db8::7"),
        ("fe80::1:5000", "fe80::1:5000"),  # unbracketed v6 never loses a group as a "port"
        ("2001:DB8:0:0::7", "2001:db8::7"),  # one host, one spelling
        ("[2001:DB8::7]:1", "2001:db8::7"),
        ("[::ffff:10.0.0.1]:5000", "10.0.0.1"),  # IPv4-mapped: the IPv4 host
        ("::ffff:10.0.0.1", "10.0.0.1"),
        ("broker.example.com:5000", "broker.example.com"),
        ("host", "host"),
    ],
)
def test_remote_host(remote: str, host: str) -> None:
    assert remote_host(remote) == host


def test_one_host_counts_once_whatever_the_spelling(clock: FakeClock) -> None:
    guard = LoginGuard(BackoffPolicy(threshold=1, initial_delay=1, max_delay=60), clock)
    for remote in ("[2001:db8::7]:1", "[2001:DB8::7]:2", "2001:db8:0::7"):
        guard.failed(remote_host(remote))
    assert guard.failures("2001:db8::7") == 3


def test_guard_refuses_within_the_window_and_forgets(clock: FakeClock) -> None:
    guard = LoginGuard(BackoffPolicy(threshold=2, initial_delay=1, max_delay=60), clock)
    assert guard.failed("h") == 0
    assert guard.refusal("h") is None
    assert guard.failed("h") == 1
    assert guard.refusal("h") == 1
    clock.advance(1)
    assert guard.refusal("h") is None
    assert guard.failed("h") == 2
    assert guard.refusal("other") is None
    clock.advance(60)
    assert guard.failures("h") == 3  # quiet for max-delay: not yet forgiven
    clock.advance(60)
    assert guard.failures("h") == 0  # quiet for twice max-delay: forgiven


def test_escalation_does_not_restart_when_the_longest_refusal_ends(clock: FakeClock) -> None:
    policy = BackoffPolicy(threshold=2, initial_delay=1, multiplier=2, max_delay=4)
    assert policy.forget_after == 8
    guard = LoginGuard(policy, clock)
    windows = []
    for _ in range(5):
        windows.append(guard.failed("h"))
        clock.advance(guard.refusal("h") or 0)  # the attacker waits out each refusal
    assert windows == [0, 1, 2, 4, 4]
    # The longest refusal just ended: the next failure is refused as long again, not
    # forgiven and free.
    assert guard.refusal("h") is None
    assert guard.failed("h") == 4
    clock.advance(7.999)
    assert guard.failures("h") == 6
    clock.advance(0.001)
    assert guard.failures("h") == 0
    assert guard.failed("h") == 0  # forgiven after forget_after: free again


def test_forget_after_must_outlast_the_longest_refusal() -> None:
    assert BackoffPolicy(max_delay=10, forget_after=10.5).forget_after == 10.5
    with pytest.raises(ValueError, match="longer than max_delay"):
        BackoffPolicy(max_delay=10, forget_after=10)


def test_guard_is_bounded(clock: FakeClock) -> None:
    guard = LoginGuard(BackoffPolicy(max_hosts=3), clock)
    for n in range(10):
        guard.failed(f"10.0.0.{n}")
    assert len(guard) == 3


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> SecurityStore:
    users = write_users(
        tmp_path / "users.toml",
        {"alice": (SECRET, ["producers"]), "bob": (BOB_SECRET, ["consumers"])},
    )
    table = {
        "users-file": str(users),
        "failed-login-threshold": 2,
        "failed-login-delay": "1s",
        "failed-login-delay-multiplier": 2,
        "failed-login-max-delay": "30s",
        "failed-login-address-threshold": 3,
        "failed-login-address-max-delay": "4s",
    }
    return SecurityStore(load_security(table, str(tmp_path / "node.toml")), clock)


def attempt(
    store: SecurityStore, password: str, remote: str = "203.0.113.9:41000", user: str = "alice"
) -> bool:
    try:
        store.authenticate(SecurityAuth(user, password, (), remote, "stomp"))
    except AuthenticationFailed:
        return False
    return True


def test_failures_earn_a_growing_refusal_that_success_resets(
    store: SecurityStore, clock: FakeClock
) -> None:
    assert not attempt(store, GUESS)
    assert not attempt(store, GUESS + "1")
    # Two failures: refused for 1 s, even with the right password.
    assert not attempt(store, SECRET)
    clock.advance(1)
    assert not attempt(store, GUESS + "2")  # third failure: 2 s
    clock.advance(1.5)
    assert not attempt(store, SECRET)
    clock.advance(0.5)
    assert attempt(store, SECRET)
    # The success reset the count: the next failure is free again.
    assert not attempt(store, GUESS)
    assert attempt(store, SECRET)


def test_refusal_is_per_host_and_user(store: SecurityStore) -> None:
    for n in range(4):
        attempt(store, f"{GUESS}{n}", remote=f"203.0.113.9:{40000 + n}")  # ports change
    assert not attempt(store, SECRET, remote="203.0.113.9:41999")
    # Guessing alice's password from one host locks out neither alice elsewhere nor
    # another user of that host.
    assert attempt(store, SECRET, remote="198.51.100.1:41000")
    assert attempt(store, BOB_SECRET, remote="203.0.113.9:41998", user="bob")


def test_a_host_earns_a_capped_delay_never_a_refusal(
    store: SecurityStore, clock: FakeClock
) -> None:
    host = "203.0.113.9:41000"
    delays = []
    for n in range(8):  # a different user each time: no (host, user) pair is refused
        assert not attempt(store, GUESS, remote=host, user=f"user{n}")
        delays.append(store.login_delay(host))
    # From the third failure (the threshold) 1 s, doubling, capped at
    # failed-login-address-max-delay (4 s).
    assert delays == [0, 0, 1, 2, 4, 4, 4, 4]
    assert store.login_delay("198.51.100.1:1") == 0  # other hosts are not slowed
    # The delay is a wait, not a refusal: the right password of another user logs in
    # from that host, even before it is over.
    assert attempt(store, BOB_SECRET, remote=host, user="bob")
    clock.advance(4)
    assert store.login_delay(host) == 0


def test_the_address_delay_is_capped_by_configuration(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"failed-login-address-max-delay: expected between"):
        load_security(
            {"users-file": "u.toml", "failed-login-address-max-delay": "10m"},
            str(tmp_path / "node.toml"),
        )
    settings = load_security(
        {"users-file": "u.toml", "failed-login-max-delay": "5s"}, str(tmp_path / "node.toml")
    )
    assert settings.address_backoff.max_delay == 5  # never beyond the per-user maximum
    assert settings.address_backoff.threshold == 10


def test_failures_and_refusals_are_audited_without_the_password(
    store: SecurityStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    attempt(store, GUESS)
    attempt(store, GUESS)
    attempt(store, SECRET)  # refused: in the back-off window
    clock.advance(5)
    attempt(store, SECRET)
    lines = [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER_NAME]
    who = "user=alice remote=203.0.113.9:41000 protocol=stomp action=login"
    assert lines == [
        f"{who} outcome=failure certificate=- failures=1 refused_for=0 host_delay=0",
        f"{who} outcome=failure certificate=- failures=2 refused_for=1 host_delay=0",
        f"{who} outcome=refused "
        'reason="too many failed logins for this user from this host" retry_after=1',
        f"{who} outcome=success method=password roles=producers",
    ]


def test_password_never_appears_in_any_log_record(
    store: SecurityStore, clock: FakeClock, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    for password in (GUESS, GUESS, SECRET, SECRET):
        attempt(store, password)
        clock.advance(0.5)
    clock.advance(100)
    attempt(store, SECRET)
    (tmp_path / "users.toml").write_text(f'[users.alice]\npassword = "{SECRET}"\n')
    # Past the invalidation interval the cache no longer answers, so the users file is
    # consulted: the watcher sees the change and logs why the new file cannot be used.
    clock.advance(10)
    assert attempt(store, SECRET, remote="198.51.100.7:1")  # the old users still serve
    [watcher] = [r for r in caplog.records if r.name == "txbridge.security"]
    assert watcher.levelno == logging.ERROR
    assert "users file changed but cannot be used" in watcher.getMessage()
    assert "plain-text password is refused" in watcher.getMessage()
    for record in caplog.records:
        rendered = " ".join([record.getMessage(), repr(record.args), repr(vars(record))])
        assert SECRET not in rendered
        assert GUESS not in rendered


def test_user_names_cannot_forge_audit_lines(
    store: SecurityStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=AUDIT_LOGGER_NAME)
    with pytest.raises(AuthenticationFailed):
        store.authenticate(SecurityAuth("x\nevent=authenticated user=root", "p", (), "1.2.3.4:5"))
    [line] = [r.getMessage() for r in caplog.records]
    assert "\n" not in line
    assert line.startswith('user="x\\nevent=authenticated user=root" remote=1.2.3.4:5 ')
