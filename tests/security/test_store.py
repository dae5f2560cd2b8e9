"""Authorization: every permission allowed and denied, most specific setting, audit lines."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from security import (
    AuthenticationFailed,
    AuthMethod,
    ConfigError,
    Permission,
    PermissionDenied,
    SecurityAuth,
    SecurityStore,
    Subject,
    load_security,
)
from security.audit import AUDIT_LOGGER_NAME
from security.config import SecuritySettings
from tests.security.helpers import FakeClock, write_users

ALL = list(Permission)


def subject(user: str, *roles: str) -> Subject:
    return Subject(user, frozenset(roles), AuthMethod.PASSWORD, "core", "10.0.0.7:5000")


def store_with(
    tmp_path: Path, clock: FakeClock, settings: list[dict[str, object]]
) -> SecurityStore:
    users = write_users(tmp_path / "users.toml", {"u": ("pw", ["r"])})
    table = {"users-file": str(users), "setting": settings}
    return SecurityStore(load_security(table, str(tmp_path / "node.toml")), clock)


@pytest.fixture
def granting(tmp_path: Path, clock: FakeClock) -> SecurityStore:
    """Each permission granted to its own role on ``app.#``."""
    setting: dict[str, object] = {"match": "app.#"}
    setting.update({p.value: [f"role-{p.value}"] for p in ALL})
    return store_with(tmp_path, clock, [setting])


@pytest.mark.parametrize("permission", ALL, ids=[p.value for p in ALL])
def test_permission_allowed_with_the_role(granting: SecurityStore, permission: Permission) -> None:
    granting.check(subject("carol", f"role-{permission.value}"), "app.x", permission)
    granting.check(subject("carol", "other", f"role-{permission.value}"), "app.x", permission.value)


@pytest.mark.parametrize("permission", ALL, ids=[p.value for p in ALL])
def test_permission_denied_without_the_role(
    granting: SecurityStore, permission: Permission, caplog: pytest.LogCaptureFixture
) -> None:
    others = [f"role-{p.value}" for p in ALL if p is not permission]
    who = subject("carol", *others)
    caplog.set_level(logging.WARNING, logger=AUDIT_LOGGER_NAME)
    with pytest.raises(PermissionDenied) as denied:
        granting.check(who, "app.x", permission)
    assert denied.value.user == "carol"
    assert denied.value.permission == permission.value
    assert denied.value.address == "app.x"
    assert (
        str(denied.value)
        == f"user 'carol' lacks permission '{permission.value}' on address 'app.x'"
    )
    [record] = [r for r in caplog.records if r.name == AUDIT_LOGGER_NAME]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"user=carol remote=10.0.0.7:5000 protocol=core action={permission.value} "
        "outcome=denied address=app.x queue=- match=app.#"
    )
    assert record.audit["action"] == permission.value  # type: ignore[attr-defined]


def test_denial_names_the_queue(granting: SecurityStore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=AUDIT_LOGGER_NAME)
    with pytest.raises(PermissionDenied, match=r"on address 'app\.x' queue 'q1'") as denied:
        granting.check(subject("carol"), "app.x", Permission.CONSUME, queue="q1")
    assert denied.value.queue == "q1"
    assert "queue=q1" in caplog.records[-1].getMessage()


def test_no_matching_setting_denies(
    granting: SecurityStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=AUDIT_LOGGER_NAME)
    with pytest.raises(PermissionDenied):
        granting.check(subject("carol", "role-send"), "elsewhere", Permission.SEND)
    assert caplog.records[-1].getMessage().endswith("match=-")


def test_every_denial_is_logged_even_when_cached(
    granting: SecurityStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=AUDIT_LOGGER_NAME)
    for _ in range(3):
        with pytest.raises(PermissionDenied):
            granting.check(subject("carol"), "app.x", Permission.SEND)
    assert len([r for r in caplog.records if "outcome=denied" in r.getMessage()]) == 3


def test_most_specific_setting_is_not_merged(tmp_path: Path, clock: FakeClock) -> None:
    # Artemis's security example: admins may send under globalqueues.europe.#, but the
    # more specific orders setting does not list them, so they may not send there.
    store = store_with(
        tmp_path,
        clock,
        [
            {"match": "globalqueues.europe.#", "send": ["admin", "europe-users"]},
            {"match": "globalqueues.europe.orders.#", "send": ["europe-users"]},
        ],
    )
    admin = subject("ada", "admin")
    store.check(admin, "globalqueues.europe.news", Permission.SEND)
    with pytest.raises(PermissionDenied):
        store.check(admin, "globalqueues.europe.orders.new", Permission.SEND)
    store.check(subject("eve", "europe-users"), "globalqueues.europe.orders.new", Permission.SEND)


def test_fully_qualified_queue_setting_beats_address_setting(
    tmp_path: Path, clock: FakeClock
) -> None:
    store = store_with(
        tmp_path,
        clock,
        [
            {"match": "orders.#", "consume": ["consumers"]},
            {"match": "orders.eu::audit", "consume": ["auditors"]},
        ],
    )
    auditor, consumer = subject("a", "auditors"), subject("c", "consumers")
    store.check(auditor, "orders.eu", Permission.CONSUME, queue="audit")
    with pytest.raises(PermissionDenied):
        store.check(consumer, "orders.eu", Permission.CONSUME, queue="audit")
    store.check(consumer, "orders.eu", Permission.CONSUME, queue="billing")
    with pytest.raises(PermissionDenied):
        store.check(auditor, "orders.eu", Permission.CONSUME, queue="billing")
    assert store.setting_for("orders.eu", "audit").match == "orders.eu::audit"  # type: ignore[union-attr]


def test_unknown_permission_is_a_programming_error(granting: SecurityStore) -> None:
    with pytest.raises(ValueError, match="unknown permission 'fly'"):
        granting.check(subject("carol"), "app.x", "fly")


def test_authenticated_subject_carries_roles_and_connection(
    settings: SecuritySettings, clock: FakeClock
) -> None:
    store = SecurityStore(settings, clock)
    who = store.authenticate(SecurityAuth("alice", "alice-secret", (), "10.1.1.1:999", "stomp"))
    assert who == Subject(
        "alice", frozenset({"producers"}), AuthMethod.PASSWORD, "stomp", "10.1.1.1:999"
    )
    store.check(who, "orders.eu", Permission.SEND)
    with pytest.raises(PermissionDenied):
        store.check(who, "orders.eu", Permission.CONSUME)


def test_cluster_user_may_do_everything(tmp_path: Path, clock: FakeClock) -> None:
    users = write_users(tmp_path / "users.toml", {"link": ("link-pw", []), "u": ("pw", [])})
    table = {"users-file": str(users), "cluster-user": "link", "setting": []}
    store = SecurityStore(load_security(table, str(tmp_path / "node.toml")), clock)
    link = store.authenticate(SecurityAuth("link", "link-pw", (), "10.0.0.2:1", "bridge"))
    assert link.internal
    for permission in Permission:
        store.check(link, "any.address", permission, queue="q")
    plain = store.authenticate(SecurityAuth("u", "pw", (), "10.0.0.2:1", "core"))
    assert not plain.internal
    with pytest.raises(PermissionDenied):
        store.check(plain, "any.address", Permission.SEND)
    with pytest.raises(AuthenticationFailed):
        store.authenticate(SecurityAuth("link", "guess", (), "10.0.0.3:1", "bridge"))


# Names an attacker might try for a built-in node-to-node user (Artemis's default
# cluster user among them) and passwords such a user might have been shipped with.
CLUSTER_LIKE_NAMES = ["cluster", "cluster-user", "CLUSTER", "ACTIVEMQ.CLUSTER.ADMIN.USER", "link"]
GUESSED_PASSWORDS = ["", "CHANGE ME!!", "cluster", "admin", "guest", None]


def test_no_cluster_user_unless_configured(tmp_path: Path, clock: FakeClock) -> None:
    # Even a user called "cluster" is a plain user until cluster-user names it.
    users = write_users(tmp_path / "users.toml", {"cluster": ("cluster-pw", []), "u": ("pw", [])})
    table = {"users-file": str(users), "setting": [], "failed-login-threshold": 1000}
    settings = load_security(table, str(tmp_path / "node.toml"))
    assert settings.cluster_user is None
    store = SecurityStore(settings, clock)
    for user, password in [("cluster", "cluster-pw"), ("u", "pw")]:
        who = store.authenticate(SecurityAuth(user, password, (), "10.0.0.2:1", "bridge"))
        assert not who.internal
        for permission in Permission:
            with pytest.raises(PermissionDenied):
                store.check(who, "any.address", permission, queue="q")
    for n, user in enumerate(CLUSTER_LIKE_NAMES):
        for password in GUESSED_PASSWORDS:
            with pytest.raises(AuthenticationFailed):
                store.authenticate(SecurityAuth(user, password, (), f"10.0.1.{n}:1", "bridge"))


def test_cluster_user_must_exist(tmp_path: Path, clock: FakeClock) -> None:
    users = write_users(tmp_path / "users.toml", {"u": ("pw", [])})
    table = {"users-file": str(users), "cluster-user": "link"}
    settings = load_security(table, str(tmp_path / "node.toml"))
    with pytest.raises(ConfigError) as error:
        SecurityStore(settings, clock)
    assert error.value.source == str(tmp_path / "node.toml")
    assert error.value.key == "security.cluster-user"
    assert error.value.expected.startswith(f"'link' is not a user of {users}: the cluster user")
    # A reload to such settings is refused too, and the store keeps what it had.
    store = SecurityStore(load_security({"users-file": str(users)}, settings.source), clock)
    with pytest.raises(ConfigError, match=r"security\.cluster-user"):
        store.reload(settings)
    assert store.settings.cluster_user is None


def test_cluster_user_may_be_a_mapped_certificate(tmp_path: Path, clock: FakeClock) -> None:
    users = write_users(tmp_path / "users.toml", {"u": ("pw", [])})
    mapping = tmp_path / "certificates.toml"
    mapping.write_text('[[certificate]]\nsubject = "CN=node-b,O=Example"\nuser = "link"\n')
    table = {
        "users-file": str(users),
        "certificate-users-file": str(mapping),
        "cluster-user": "link",
    }
    store = SecurityStore(load_security(table, str(tmp_path / "node.toml")), clock)
    assert store.settings.cluster_user == "link"
    with pytest.raises(ConfigError, match=re.escape(f"not a user of {users} or {mapping}")):
        SecurityStore(
            load_security({**table, "cluster-user": "other"}, str(tmp_path / "n.toml")), clock
        )


def test_disabled_security_allows_everything(tmp_path: Path, clock: FakeClock) -> None:
    store = SecurityStore(load_security({"enabled": False}, str(tmp_path / "n.toml")), clock)
    who = store.authenticate(SecurityAuth("anyone", "anything", (), "1.2.3.4:5", "core"))
    assert who.method is AuthMethod.NONE
    for permission in Permission:
        store.check(who, "x", permission)


def test_reload_with_new_settings_changes_decisions(
    settings: SecuritySettings, clock: FakeClock, tmp_path: Path
) -> None:
    store = SecurityStore(settings, clock)
    alice = store.authenticate(SecurityAuth("alice", "alice-secret", (), "1.1.1.1:1", "core"))
    store.check(alice, "orders.eu", Permission.SEND)
    stricter = load_security(
        {"users-file": "users.toml", "setting": [{"match": "orders.#", "send": ["nobody"]}]},
        str(tmp_path / "node.toml"),
    )
    store.reload(stricter)
    with pytest.raises(PermissionDenied):
        store.check(alice, "orders.eu", Permission.SEND)
    assert store.settings is stricter
