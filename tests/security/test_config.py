"""The [security] table: every key, and bad files refused naming file, key and expectation."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from security import ConfigError, Permission, SecuritySetting, load_security
from security.bruteforce import BackoffPolicy
from security.durations import parse_duration
from security.roles import RoleRule, SourceKind

SOURCE = "/etc/txbridge/node.toml"

ISSUE_EXAMPLE = """
[security]
enabled = true
users-file = "users.toml"
security-invalidation-interval = "10s"
[[security.setting]]
match = "orders.#"
send = ["producers"]
consume = ["consumers"]
"""


def test_the_issue_example() -> None:
    settings = load_security(tomllib.loads(ISSUE_EXAMPLE)["security"], SOURCE)
    assert settings.enabled
    assert settings.users_file == Path("/etc/txbridge/users.toml")
    assert settings.invalidation_interval == 10.0
    assert settings.settings == (
        SecuritySetting(
            "orders.#",
            {
                Permission.SEND: frozenset({"producers"}),
                Permission.CONSUME: frozenset({"consumers"}),
            },
        ),
    )
    assert settings.source == SOURCE


def test_every_key() -> None:
    table: dict[str, Any] = {
        "enabled": True,
        "users-file": "/abs/users.toml",
        "certificate-users-file": "certs.toml",
        "security-invalidation-interval": "500ms",
        "authentication-cache-size": 5,
        "authorization-cache-size": 0,
        "cluster-user": "node-link",
        "failed-login-threshold": 5,
        "failed-login-delay": "2s",
        "failed-login-delay-multiplier": 1.5,
        "failed-login-max-delay": "1m",
        "failed-login-forget-after": "5m",
        "failed-login-address-threshold": 20,
        "failed-login-address-max-delay": "4s",
        "max-concurrent-hashes": 3,
        "max-queued-logins": 0,
        "setting": [{"match": "#", **{p.value: ["admins"] for p in Permission}}],
        "role-mapping": [
            {"from": "dn:CN=app, O=Example", "to": "producers"},
            {"from": "role:ops", "to": "admins"},
            {"from": "user:alice", "to": "auditors"},
        ],
    }
    settings = load_security(table, SOURCE)
    assert settings.users_file == Path("/abs/users.toml")
    assert settings.certificate_users_file == Path("/etc/txbridge/certs.toml")
    assert settings.invalidation_interval == 0.5
    assert (settings.authentication_cache_size, settings.authorization_cache_size) == (5, 0)
    assert settings.cluster_user == "node-link"
    assert settings.backoff == BackoffPolicy(5, 2.0, 1.5, 60.0, forget_after=300.0)
    assert settings.address_backoff == BackoffPolicy(20, 2.0, 1.5, 4.0, forget_after=300.0)
    assert (settings.max_concurrent_hashes, settings.max_queued_logins) == (3, 0)
    assert settings.settings[0].roles_for(Permission.MANAGE) == {"admins"}
    assert settings.role_mapping == (
        RoleRule(SourceKind.DN, "CN=app,O=Example", "producers"),
        RoleRule(SourceKind.ROLE, "ops", "admins"),
        RoleRule(SourceKind.USER, "alice", "auditors"),
    )


def test_defaults_and_base_dir(tmp_path: Path) -> None:
    settings = load_security({"users-file": "u.toml"}, "<string>", base_dir=tmp_path)
    assert settings.users_file == tmp_path / "u.toml"
    assert settings.invalidation_interval == 10.0
    assert settings.authentication_cache_size == settings.authorization_cache_size == 1000
    assert settings.cluster_user is None
    assert settings.settings == ()
    assert settings.backoff.forget_after == 2 * settings.backoff.max_delay == 600


def test_disabled_needs_no_users() -> None:
    assert not load_security({"enabled": False}, SOURCE).enabled


BASE = {"users-file": "users.toml"}


@pytest.mark.parametrize(
    ("table", "key", "expected"),
    [
        ({"enable": True}, "security.enable", "unknown key (did you mean 'enabled'?)"),
        ({"enabled": "yes"}, "security.enabled", "expected true or false, got a string"),
        ({"users-file": 3}, "security.users-file", "expected a string, got an integer"),
        (
            {"enabled": True},
            "security.users-file",
            "users-file or certificate-users-file is required",
        ),
        (
            {"security-invalidation-interval": "10"},
            "security.security-invalidation-interval",
            'expected a duration such as "500ms", "10s", "5m" or "1h", got \'10\'',
        ),
        (
            {"security-invalidation-interval": 10},
            "security.security-invalidation-interval",
            "expected a duration",
        ),
        ({"failed-login-delay": "soon"}, "security.failed-login-delay", "expected a duration"),
        (
            {"authentication-cache-size": -1},
            "security.authentication-cache-size",
            "expected an integer of at least 0, got -1",
        ),
        (
            {"authorization-cache-size": True},
            "security.authorization-cache-size",
            "expected an integer, got a boolean",
        ),
        ({"failed-login-threshold": 0}, "security.failed-login-threshold", "at least 1"),
        ({"max-concurrent-hashes": 0}, "security.max-concurrent-hashes", "at least 1"),
        ({"max-queued-logins": -1}, "security.max-queued-logins", "at least 0"),
        (
            {"failed-login-address-threshold": 0},
            "security.failed-login-address-threshold",
            "at least 1",
        ),
        (
            {"failed-login-delay-multiplier": 0.5},
            "security.failed-login-delay-multiplier",
            "at least 1",
        ),
        (
            {"failed-login-delay": "1m", "failed-login-max-delay": "1s"},
            "security.failed-login-max-delay",
            "expected at least failed-login-delay (60s), got 1s",
        ),
        ({"cluster-user": ""}, "security.cluster-user", "expected a non-empty string"),
        (
            {"setting": {"match": "#"}},
            "security.setting",
            "expected an array of tables ([[security.setting]] blocks), got a table",
        ),
        ({"setting": ["#"]}, "security.setting[0]", "expected a table, got a string"),
        ({"setting": [{"send": ["a"]}]}, "security.setting[0].match", "missing"),
        (
            {"setting": [{"match": ""}]},
            "security.setting[0].match",
            'expected a non-empty match pattern like "orders.#"',
        ),
        ({"setting": [{"match": "a..b"}]}, "security.setting[0].match", "empty word"),
        ({"setting": [{"match": "orders#"}]}, "security.setting[0].match", "whole words"),
        (
            {"setting": [{"match": "#"}, {"match": "a", "sned": ["x"]}]},
            "security.setting[1].sned",
            "unknown permission 'sned' (did you mean 'send'?) (known: browse, consume, "
            "create-address, create-durable-queue, create-non-durable-queue, delete-address, "
            "delete-durable-queue, delete-non-durable-queue, manage, send; and match, the "
            "pattern)",
        ),
        (
            {"setting": [{"match": "#", "fly": ["x"]}]},
            "security.setting[0].fly",
            "unknown permission 'fly' (known: browse, consume,",
        ),
        (
            {"failed-login-delay": "0s"},
            "security.failed-login-delay",
            "expected a duration longer than 0s: the brute-force slowdown cannot be turned off",
        ),
        (
            {"failed-login-delay": "0ms", "failed-login-max-delay": "0s"},
            "security.failed-login-delay",
            "longer than 0s",
        ),
        (
            {"failed-login-max-delay": "30s", "failed-login-forget-after": "30s"},
            "security.failed-login-forget-after",
            "expected longer than failed-login-max-delay (30s), got 30s",
        ),
        (
            {"role-mapping": [{"from": "ops", "to": "admins"}]},
            "security.role-mapping[0].from",
            'expected "role:NAME", "user:NAME" or "dn:DN" (such as "dn:CN=app,O=Example"), '
            "got 'ops'",
        ),
        (
            {"role-mapping": [{"from": "group:ops", "to": "admins"}]},
            "security.role-mapping[0].from",
            'expected "role:NAME", "user:NAME" or "dn:DN"',
        ),
        (
            {"role-mapping": [{"from": "role:", "to": "admins"}]},
            "security.role-mapping[0].from",
            'expected "role:NAME"',
        ),
        (
            {"role-mapping": [{"from": "dn:not a dn", "to": "admins"}]},
            "security.role-mapping[0].from",
            "'not a dn' is not an RFC 4514 DN",
        ),
        (
            {"setting": [{"match": "#"}, {"match": "a"}, {"match": "b", "send": "producers"}]},
            "security.setting[2].send",
            'expected a list of role names (strings) like ["producers", "admins"], got a string',
        ),
        (
            {"setting": [{"match": "a", "consume": ["ok", 5]}]},
            "security.setting[0].consume[1]",
            "expected a non-empty string",
        ),
        (
            {"setting": [{"match": "a.#"}, {"match": "a.#"}]},
            "security.setting[1].match",
            "'a.#' is already the match of security.setting[0]",
        ),
        ({"role-mapping": [{"from": "x"}]}, "security.role-mapping[0].to", "missing"),
        (
            {"role-mapping": [{"from": "x", "to": "y", "too": 1}]},
            "security.role-mapping[0].too",
            "unknown key",
        ),
    ],
)
def test_bad_tables(table: dict[str, Any], key: str, expected: str) -> None:
    full = table if "enabled" in table and "users-file" not in table else {**BASE, **table}
    with pytest.raises(ConfigError) as error:
        load_security(full, SOURCE)
    assert error.value.source == SOURCE
    assert error.value.key == key
    assert expected in error.value.expected
    assert str(error.value) == f"{SOURCE}: {key}: {error.value.expected}"


def test_not_a_table() -> None:
    with pytest.raises(ConfigError, match="expected a table"):
        load_security(["security"], SOURCE)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "seconds"), [("500ms", 0.5), ("10s", 10), ("2m", 120), ("1h", 3600), ("1.5s", 1.5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "s", "-1s", "10 seconds", "1d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(text)
