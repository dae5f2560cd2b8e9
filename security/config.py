"""The ``[security]`` table of the node's configuration, checked and turned into attrs.

```toml
[security]
enabled = true
users-file = "users.toml"
security-invalidation-interval = "10s"
[[security.setting]]
match = "orders.#"
send = ["producers"]
consume = ["consumers"]
```

docs/security.md lists every key. Errors name the file, the dotted key (array items
counted from 0, as in ``security.setting[2].send``) and what was expected.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from security.bruteforce import BackoffPolicy
from security.errors import ConfigError
from security.matcher import InvalidPattern, parse_pattern
from security.permissions import PERMISSION_NAMES, Permission
from security.roles import RoleRule
from security.validate import (
    check_keys,
    expect_bool,
    expect_duration,
    expect_int,
    expect_names,
    expect_number,
    expect_str,
    expect_tables,
    key_path,
)

PREFIX = "security"

DEFAULT_INVALIDATION_INTERVAL = 10.0
DEFAULT_AUTHENTICATION_CACHE_SIZE = 1000
DEFAULT_AUTHORIZATION_CACHE_SIZE = 1000
DEFAULT_ADDRESS_THRESHOLD = 10
DEFAULT_ADDRESS_MAX_DELAY = 10.0
DEFAULT_MAX_CONCURRENT_HASHES = 2
DEFAULT_MAX_QUEUED_LOGINS = 16


def _default_address_backoff() -> BackoffPolicy:
    pair = BackoffPolicy()
    return BackoffPolicy(
        DEFAULT_ADDRESS_THRESHOLD,
        pair.initial_delay,
        pair.multiplier,
        DEFAULT_ADDRESS_MAX_DELAY,
        pair.max_hosts,
        forget_after=pair.forget_after,
    )


SECURITY_KEYS = frozenset(
    {
        "enabled",
        "users-file",
        "certificate-users-file",
        "security-invalidation-interval",
        "authentication-cache-size",
        "authorization-cache-size",
        "cluster-user",
        "failed-login-threshold",
        "failed-login-delay",
        "failed-login-delay-multiplier",
        "failed-login-max-delay",
        "failed-login-forget-after",
        "failed-login-address-threshold",
        "failed-login-address-max-delay",
        "max-concurrent-hashes",
        "max-queued-logins",
        "setting",
        "role-mapping",
    }
)
SETTING_KEYS = PERMISSION_NAMES | {"match"}
ROLE_MAPPING_KEYS = frozenset({"from", "to"})

_EMPTY: frozenset[str] = frozenset()


@attrs.frozen
class SecuritySetting:
    """One ``[[security.setting]]``: a match pattern and the roles granted each permission.

    A permission the setting does not list is granted to nobody on what it matches.
    """

    match: str
    grants: Mapping[Permission, frozenset[str]] = attrs.field(factory=dict)

    def roles_for(self, permission: Permission | str) -> frozenset[str]:
        """The roles granted ``permission`` on what this setting matches."""
        return self.grants.get(Permission(permission), _EMPTY)


@attrs.frozen
class SecuritySettings:
    """Everything ``[security]`` says. Paths are absolute (relative ones are taken from
    the configuration file's directory)."""

    enabled: bool = True
    users_file: Path | None = None
    certificate_users_file: Path | None = None
    invalidation_interval: float = DEFAULT_INVALIDATION_INTERVAL
    authentication_cache_size: int = DEFAULT_AUTHENTICATION_CACHE_SIZE
    authorization_cache_size: int = DEFAULT_AUTHORIZATION_CACHE_SIZE
    cluster_user: str | None = None
    backoff: BackoffPolicy = attrs.field(factory=BackoffPolicy)
    """Per (host, user): its window refuses that user from that host."""
    address_backoff: BackoffPolicy = attrs.field(factory=_default_address_backoff)
    """Per host, any user: its window (capped low) only delays the host's next login."""
    max_concurrent_hashes: int = DEFAULT_MAX_CONCURRENT_HASHES
    max_queued_logins: int = DEFAULT_MAX_QUEUED_LOGINS
    settings: tuple[SecuritySetting, ...] = ()
    role_mapping: tuple[RoleRule, ...] = ()
    source: str = "<defaults>"


def _path(value: object, source: str, key: str, base: Path) -> Path:
    path = Path(expect_str(value, source, key)).expanduser()
    return path if path.is_absolute() else base / path


def _check_permission_keys(entry: Mapping[str, Any], source: str, key: str) -> None:
    for name in entry:
        if name not in SETTING_KEYS:
            close = difflib.get_close_matches(name, sorted(SETTING_KEYS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                source,
                key_path(key, name),
                f"unknown permission {name!r}{hint} (known: {', '.join(sorted(PERMISSION_NAMES))}"
                "; and match, the pattern)",
            )


def _setting(entry: Mapping[str, Any], source: str, key: str) -> SecuritySetting:
    _check_permission_keys(entry, source, key)
    if "match" not in entry:
        raise ConfigError(
            source, key_path(key, "match"), 'missing: a match pattern like "orders.#"'
        )
    match_key = key_path(key, "match")
    match = expect_str(entry["match"], source, match_key, empty=True)
    if not match:
        raise ConfigError(source, match_key, 'expected a non-empty match pattern like "orders.#"')
    try:
        parse_pattern(match)
    except InvalidPattern as error:
        raise ConfigError(source, match_key, f"not a match pattern: {error}") from None
    grants = {
        Permission(name): frozenset(expect_names(value, source, key_path(key, name)))
        for name, value in entry.items()
        if name != "match"
    }
    return SecuritySetting(match, grants)


def _settings(value: object, source: str) -> tuple[SecuritySetting, ...]:
    key = key_path(PREFIX, "setting")
    result: list[SecuritySetting] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(expect_tables(value, source, key)):
        setting = _setting(entry, source, key_path(key, index))
        if setting.match in first_index:
            raise ConfigError(
                source,
                key_path(key_path(key, index), "match"),
                f"{setting.match!r} is already the match of {key}[{first_index[setting.match]}]"
                "; merge the two settings",
            )
        first_index[setting.match] = index
        result.append(setting)
    return tuple(result)


def _role_mapping(value: object, source: str) -> tuple[RoleRule, ...]:
    key = key_path(PREFIX, "role-mapping")
    rules: list[RoleRule] = []
    for index, entry in enumerate(expect_tables(value, source, key)):
        item = key_path(key, index)
        check_keys(entry, ROLE_MAPPING_KEYS, source, item)
        for name in ("from", "to"):
            if name not in entry:
                raise ConfigError(
                    source, key_path(item, name), "missing: a role mapping needs from and to"
                )
        origin = expect_str(entry["from"], source, key_path(item, "from"))
        role = expect_str(entry["to"], source, key_path(item, "to"))
        try:
            rules.append(RoleRule.parse(origin, role))
        except ValueError as error:
            raise ConfigError(source, key_path(item, "from"), f"{error}, got {origin!r}") from None
    return tuple(rules)


def _backoff(table: Mapping[str, Any], source: str) -> BackoffPolicy:
    default = BackoffPolicy()

    def key(name: str) -> str:
        return key_path(PREFIX, name)

    threshold = default.threshold
    if "failed-login-threshold" in table:
        threshold = expect_int(
            table["failed-login-threshold"], source, key("failed-login-threshold"), minimum=1
        )
    delay = default.initial_delay
    if "failed-login-delay" in table:
        delay = expect_duration(table["failed-login-delay"], source, key("failed-login-delay"))
        if delay <= 0:
            raise ConfigError(
                source,
                key("failed-login-delay"),
                "expected a duration longer than 0s: the brute-force slowdown cannot be turned "
                "off; raise failed-login-threshold to allow more failed logins before it starts",
            )
    max_delay = default.max_delay
    if "failed-login-max-delay" in table:
        max_delay = expect_duration(
            table["failed-login-max-delay"], source, key("failed-login-max-delay")
        )
    multiplier = default.multiplier
    if "failed-login-delay-multiplier" in table:
        multiplier = expect_number(
            table["failed-login-delay-multiplier"],
            source,
            key("failed-login-delay-multiplier"),
            minimum=1.0,
        )
    if max_delay < delay:
        raise ConfigError(
            source,
            key("failed-login-max-delay"),
            f"expected at least failed-login-delay ({delay:g}s), got {max_delay:g}s",
        )
    forget_after = 2 * max_delay
    if "failed-login-forget-after" in table:
        forget_after = expect_duration(
            table["failed-login-forget-after"], source, key("failed-login-forget-after")
        )
        if forget_after <= max_delay:
            raise ConfigError(
                source,
                key("failed-login-forget-after"),
                f"expected longer than failed-login-max-delay ({max_delay:g}s), got "
                f"{forget_after:g}s: a host forgiven when its longest refusal ends would start "
                "over with free failures",
            )
    return BackoffPolicy(
        threshold, delay, multiplier, max_delay, default.max_hosts, forget_after=forget_after
    )


def _address_backoff(table: Mapping[str, Any], source: str, pair: BackoffPolicy) -> BackoffPolicy:
    """The per-host policy: its own threshold and a cap on its delay, the rest as the
    per-(host, user) one."""
    threshold = DEFAULT_ADDRESS_THRESHOLD
    name = "failed-login-address-threshold"
    if name in table:
        threshold = expect_int(table[name], source, key_path(PREFIX, name), minimum=1)
    cap = min(DEFAULT_ADDRESS_MAX_DELAY, pair.max_delay)
    name = "failed-login-address-max-delay"
    if name in table:
        cap = expect_duration(table[name], source, key_path(PREFIX, name))
        if not pair.initial_delay <= cap <= pair.max_delay:
            raise ConfigError(
                source,
                key_path(PREFIX, name),
                f"expected between failed-login-delay ({pair.initial_delay:g}s) and "
                f"failed-login-max-delay ({pair.max_delay:g}s), got {cap:g}s",
            )
    cap = max(cap, pair.initial_delay)
    return BackoffPolicy(
        threshold,
        pair.initial_delay,
        pair.multiplier,
        cap,
        pair.max_hosts,
        forget_after=pair.forget_after,
    )


def load_security(
    table: Mapping[str, Any], source: str, base_dir: Path | None = None
) -> SecuritySettings:
    """Check the ``[security]`` table parsed from the file ``source``.

    ``base_dir`` (default: the directory of ``source``) anchors relative file names.
    Raises :class:`ConfigError` naming ``source``, the key and what was expected.
    """
    if not isinstance(table, Mapping):
        raise ConfigError(source, PREFIX, "expected a table ([security])")
    check_keys(table, SECURITY_KEYS, source, PREFIX)
    base = base_dir if base_dir is not None else Path(source).parent

    def key(name: str) -> str:
        return key_path(PREFIX, name)

    enabled = expect_bool(table.get("enabled", True), source, key("enabled"))
    users_file = (
        _path(table["users-file"], source, key("users-file"), base)
        if "users-file" in table
        else None
    )
    certificate_users_file = (
        _path(table["certificate-users-file"], source, key("certificate-users-file"), base)
        if "certificate-users-file" in table
        else None
    )
    interval = DEFAULT_INVALIDATION_INTERVAL
    if "security-invalidation-interval" in table:
        interval = expect_duration(
            table["security-invalidation-interval"], source, key("security-invalidation-interval")
        )
    authentication_cache_size = expect_int(
        table.get("authentication-cache-size", DEFAULT_AUTHENTICATION_CACHE_SIZE),
        source,
        key("authentication-cache-size"),
    )
    authorization_cache_size = expect_int(
        table.get("authorization-cache-size", DEFAULT_AUTHORIZATION_CACHE_SIZE),
        source,
        key("authorization-cache-size"),
    )
    cluster_user = (
        expect_str(table["cluster-user"], source, key("cluster-user"))
        if "cluster-user" in table
        else None
    )
    max_concurrent_hashes = expect_int(
        table.get("max-concurrent-hashes", DEFAULT_MAX_CONCURRENT_HASHES),
        source,
        key("max-concurrent-hashes"),
        minimum=1,
    )
    max_queued_logins = expect_int(
        table.get("max-queued-logins", DEFAULT_MAX_QUEUED_LOGINS),
        source,
        key("max-queued-logins"),
    )
    if enabled and users_file is None and certificate_users_file is None:
        raise ConfigError(
            source,
            key("users-file"),
            "security is enabled, so users-file or certificate-users-file is required "
            "(or set enabled = false)",
        )
    backoff = _backoff(table, source)
    return SecuritySettings(
        enabled=enabled,
        users_file=users_file,
        certificate_users_file=certificate_users_file,
        invalidation_interval=interval,
        authentication_cache_size=authentication_cache_size,
        authorization_cache_size=authorization_cache_size,
        cluster_user=cluster_user,
        backoff=backoff,
        address_backoff=_address_backoff(table, source, backoff),
        max_concurrent_hashes=max_concurrent_hashes,
        max_queued_logins=max_queued_logins,
        settings=_settings(table.get("setting", []), source),
        role_mapping=_role_mapping(table.get("role-mapping", []), source),
        source=source,
    )
