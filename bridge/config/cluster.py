"""``[cluster]``: the cluster a node is a member of, and how its failover map is made
(docs/ha.md).

Names follow Artemis where a concept matches: the cluster's ``name``, its cluster
``user`` (Artemis's ``cluster-user``; with security on, the ``[security] cluster-user``,
which the security store checks against its users), the static ``members``. The
``password`` is given as a bridge's is. ``failover-policy`` is imported when the file is
read, so a policy that cannot be used stops the node before it starts.

How the members find each other and their clients the store they were on: ``store`` (the
name of the store the node serves when live: its own name, or for a backup the name of
the node whose store it shares or copies), ``retry-interval`` (Artemis's
cluster-connection name: the wait between attempts to link with a member) and
``connect-hold-timeout`` (how long a client asking for a store nobody serves yet is held
before it is told to try again). ``drain-target-timeout``: how long a graceful drain waits
for its view to hold a member to drain to.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from bridge.config.checks import expect_name, expect_url, required
from bridge.ha.failover import IFailoverPolicy, PolicyError, load_policy
from security import SecuritySettings
from security.errors import ConfigError
from security.validate import check_keys, describe, expect_duration, expect_str, key_path
from transport.urls import URL

DEFAULT_POLICY = "ring"
MACHINE_ID = Path("/etc/machine-id")
DEFAULT_RETRY_INTERVAL = 0.5
DEFAULT_HOLD_TIMEOUT = 15.0
DEFAULT_DRAIN_TARGET_TIMEOUT = 15.0
_KEYS = (
    "name",
    "user",
    "password",
    "members",
    "failover-policy",
    "host-id",
    "store",
    "retry-interval",
    "connect-hold-timeout",
    "drain-target-timeout",
)


@attrs.frozen
class ClusterSettings:
    """``[cluster]``, checked."""

    name: str
    user: str
    """The user the members log in to each other as."""
    members: tuple[URL, ...]
    """The static members: where a member looks for the others."""
    failover_policy: IFailoverPolicy = attrs.field(eq=False)
    policy_name: str = DEFAULT_POLICY
    """``failover-policy`` as written: ``ring``, ``rendezvous`` or ``package.module:Class``."""
    password: str | None = attrs.field(default=None, repr=False)
    host_id: str | None = None
    """``host-id`` as written; None: the machine's (:meth:`own_host_id`)."""
    store: str | None = None
    """``store``: the store this node serves when live; None: the node's own name."""
    retry_interval: float = DEFAULT_RETRY_INTERVAL
    """``retry-interval``: seconds between attempts to link with a member."""
    hold_timeout: float = DEFAULT_HOLD_TIMEOUT
    """``connect-hold-timeout``: how long a RECONNECT for a store that no member serves
    yet waits for one to serve it."""
    drain_target_timeout: float = DEFAULT_DRAIN_TARGET_TIMEOUT
    """``drain-target-timeout``: how long a drain waits for the members' view to hold a
    failover node of this one before it fails."""

    def own_host_id(self) -> str:
        """The node's host id: ``host-id``, or this machine's id."""
        return self.host_id if self.host_id is not None else machine_host_id()


def machine_host_id(
    machine_id: Path = MACHINE_ID, hostname: Callable[[], str] = socket.gethostname
) -> str:
    """This machine's id (systemd's ``/etc/machine-id``: the same whatever its addresses),
    or its host name where there is none."""
    try:
        text = machine_id.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    # systemd writes "uninitialized" until the first boot has set the id.
    return text if text and text != "uninitialized" else hostname()


def _members(value: object, source: str, base_dir: Path) -> tuple[URL, ...]:
    key = "cluster.members"
    if not isinstance(value, list) or not value:
        got = "an empty array" if value == [] else describe(value)
        raise ConfigError(source, key, f"expected a non-empty array of member URLs, got {got}")
    urls: list[URL] = []
    for index, item in enumerate(value):
        url = expect_url(item, source, key_path(key, index), base_dir)
        if url in urls:
            raise ConfigError(
                source, key_path(key, index), f"{item!r} is already member {urls.index(url)}"
            )
        urls.append(url)
    return tuple(urls)


def _host_id(value: object, source: str) -> str:
    key = "cluster.host-id"
    text = expect_name(value, source, key)
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return text
    raise ConfigError(
        source,
        key,
        f"expected a machine id, not an address ({text!r}): a machine with several "
        "addresses would count as several hosts",
    )


def _user(value: object, source: str, security: SecuritySettings) -> str:
    key = "cluster.user"
    user = expect_str(value, source, key)
    if not security.enabled or security.cluster_user == user:
        return user
    if security.cluster_user is None:
        why = f"security is enabled, so [security] cluster-user must name {user!r} too"
    else:
        why = f"expected [security] cluster-user, {security.cluster_user!r}, got {user!r}"
    raise ConfigError(source, key, f"{why}: the members log in to each other as the cluster user")


def parse_cluster(
    table: Mapping[str, Any], source: str, base_dir: Path, security: SecuritySettings
) -> ClusterSettings:
    """Check ``[cluster]``; ``base_dir`` anchors the members' relative TLS files, and
    ``security`` is the node's ``[security]``, whose cluster user ``user`` must be."""
    check_keys(table, _KEYS, source, "cluster")
    name = expect_name(required(table, "name", source, "cluster"), source, "cluster.name")
    user = _user(required(table, "user", source, "cluster"), source, security)
    members = _members(required(table, "members", source, "cluster"), source, base_dir)
    policy_name = expect_str(
        table.get("failover-policy", DEFAULT_POLICY), source, "cluster.failover-policy"
    )
    try:
        policy = load_policy(policy_name)
    except PolicyError as error:
        raise ConfigError(source, "cluster.failover-policy", str(error)) from None
    password = (
        expect_str(table["password"], source, "cluster.password", empty=True)
        if "password" in table
        else None
    )
    host_id = _host_id(table["host-id"], source) if "host-id" in table else None
    store = expect_name(table["store"], source, "cluster.store") if "store" in table else None
    retry = _positive(table, "retry-interval", DEFAULT_RETRY_INTERVAL, source)
    hold = _positive(table, "connect-hold-timeout", DEFAULT_HOLD_TIMEOUT, source)
    drain = _positive(table, "drain-target-timeout", DEFAULT_DRAIN_TARGET_TIMEOUT, source)
    return ClusterSettings(
        name, user, members, policy, policy_name, password, host_id, store, retry, hold, drain
    )


def _positive(table: Mapping[str, Any], key: str, default: float, source: str) -> float:
    written = table.get(key)
    if written is None:
        return default
    value = expect_duration(written, source, f"cluster.{key}")
    if value <= 0:
        raise ConfigError(source, f"cluster.{key}", "expected a duration above zero")
    return value
