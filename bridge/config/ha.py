"""``[ha]``: high availability, under ActiveMQ's and Artemis's names (docs/ha.md).

With a shared store, the live lock is kept where the store is: the lease row in the
database of a PostgreSQL ``[store]``; for an SQLite store, an exclusive file lock in the
store's directory (``[store] data-dir``, which the nodes share), with the epoch in the
store. With replication each node keeps its own SQLite store, the live node copies it to
a backup, and the lease lives in the PostgreSQL database that ``lease-url`` names: it is
what proves a live node gone before its backup takes over. A replication pair without
``lease-url`` proves it by a quorum vote of the ``[cluster] members`` instead (Artemis's
``vote-on-replication-failure``, ``quorum-size``, ``quorum-vote-wait``): the node's file
must then have enough members (:func:`check_quorum`).

The timings are refused unless they can fence in time: a renewal must fit twice in the
lease's life (``lease-ping-time < lease-reap-time / 2``: one renewal may fail and the next
still land before expiry), and a statement must give up before the next renewal is due
(``lease-query-timeout < lease-ping-time``), so that no write can land after the lease
could have passed to another node. ActiveMQ's own defaults renew every 30 s a lease that
lasts 10 s, and only warn.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import attrs

from bridge.config.checks import expect_url
from security.errors import ConfigError
from security.validate import check_keys, expect_bool, expect_duration, expect_int, expect_str
from transport.urls import URL

DEFAULT_PING = 1.0
DEFAULT_REAP = 5.0
DEFAULT_QUERY_TIMEOUT = 0.5
DEFAULT_MAX_CLOCK_SKEW = 1.0
DEFAULT_CRITICAL_ANALYZER_TIMEOUT = 120.0

DEFAULT_SYNC_TIMEOUT = 30.0
DEFAULT_VOTE_WAIT = 5.0

_KEYS = (
    "policy",
    "lease-ping-time",
    "lease-reap-time",
    "lease-query-timeout",
    "max-clock-skew",
    "critical-analyzer-timeout",
    "lease-url",
    "peers",
    "cluster-user",
    "cluster-password",
    "initial-replication-sync-timeout",
    "allow-failback",
    "failover-on-shutdown",
    "vote-on-replication-failure",
    "quorum-size",
    "quorum-vote-wait",
)
_REPLICATION_KEYS = _KEYS[_KEYS.index("lease-url") :]
_QUORUM_KEYS = _KEYS[_KEYS.index("vote-on-replication-failure") :]


class HaPolicy(StrEnum):
    """A node's part: the primary and the backups run the same way (whoever holds the
    lease is live); the names say which node an operator means to be live. With
    replication only the primary may be the first live node of a new pair."""

    PRIMARY = "shared-store-primary"
    BACKUP = "shared-store-backup"
    REPLICATION_PRIMARY = "replication-primary"
    REPLICATION_BACKUP = "replication-backup"

    @property
    def backup(self) -> bool:
        """A backup by configuration: it serves another node's store once it takes over."""
        return self in (HaPolicy.BACKUP, HaPolicy.REPLICATION_BACKUP)

    @property
    def replicated(self) -> bool:
        return self in (HaPolicy.REPLICATION_PRIMARY, HaPolicy.REPLICATION_BACKUP)


@attrs.frozen
class Replication:
    """The replication keys of ``[ha]``."""

    peers: tuple[URL, ...]
    """``peers``: the core acceptor URLs of the pair's other nodes, where a backup looks
    for the live node (``tls://`` ones with the file options of a bridge's target)."""
    cluster_user: str
    """``cluster-user``: who a backup logs in as, and the only user a live node replicates
    to (a user of ``[security]``)."""
    cluster_password: str | None = attrs.field(repr=False)
    sync_timeout: float = DEFAULT_SYNC_TIMEOUT
    """``initial-replication-sync-timeout``: how long the live node holds its confirmations
    back for the last step of a backup's copy before it gives that copy up."""
    allow_failback: bool = False
    """``allow-failback`` (the primary's): come back as the live node's backup, and once in
    sync be live again, the live node handing over."""
    failover_on_shutdown: bool = True
    """``failover-on-shutdown``: at a clean stop of the live node, its backup in sync takes
    over (False: the lease stops naming the backup first, and the pair waits for the
    stopped node)."""


@attrs.frozen
class QuorumVote:
    """A replication pair without ``lease-url``: who is live is decided by a vote of the
    ``[cluster] members`` (docs/ha.md, "Quorum vote")."""

    vote_on_replication_failure: bool = False
    """``vote-on-replication-failure`` (the live node's): when it loses its backup, it
    confirms nothing more until a quorum of voters lets it go on alone as the next
    activation sequence, and stops serving if they do not (Artemis's default is false, and
    so is ours)."""
    size: int | None = None
    """``quorum-size``: the grants a vote needs; None: a majority of the voters."""
    vote_wait: float = DEFAULT_VOTE_WAIT
    """``quorum-vote-wait``: how long a vote waits for the voters' answers."""

    def needed(self, voters: int) -> int:
        """The grants a vote needs among ``voters``."""
        return self.size if self.size is not None else voters // 2 + 1


@attrs.frozen
class HaSettings:
    """``[ha]``, checked; durations in seconds."""

    policy: HaPolicy
    url: str | None
    """The PostgreSQL URL of ``[store]``: the lease lives beside the messages (None: the
    store is SQLite, the lock a file in ``store_dir``)."""
    store_dir: Path
    ping: float = DEFAULT_PING
    """``lease-ping-time``: how often the live node renews the lease."""
    reap: float = DEFAULT_REAP
    """``lease-reap-time``: how long an unrenewed lease lasts."""
    query_timeout: float = DEFAULT_QUERY_TIMEOUT
    """``lease-query-timeout``: the longest any lease statement may take."""
    max_clock_skew: float = DEFAULT_MAX_CLOCK_SKEW
    """``max-clock-skew``: a node clock further than this from the database's is logged
    and shown in status (the lease never depends on it)."""
    replication: Replication | None = None
    """With the ``replication-*`` policies."""
    critical_timeout: float = DEFAULT_CRITICAL_ANALYZER_TIMEOUT
    """``critical-analyzer-timeout`` (Artemis's name): the live node's lease thread stops
    renewing once the reactor has not turned for this long, so a node that hangs serving
    nobody loses the lease (a node loading a large store holds its reactor for seconds:
    keep it well above that)."""
    quorum: QuorumVote | None = None
    """With the ``replication-*`` policies and no ``lease-url``."""

    @property
    def keeper(self) -> str:
        """Where the live lock is kept, for logs and status."""
        if self.quorum is not None:
            return "a quorum vote of the cluster's members"
        return "the database's lease" if self.url is not None else f"{self.store_dir}/live.lock"


def _positive(table: Mapping[str, Any], key: str, default: float, source: str) -> float:
    value = expect_duration(table.get(key, _seconds(default)), source, f"ha.{key}")
    if value <= 0:
        raise ConfigError(source, f"ha.{key}", "expected a duration above zero")
    return value


def _seconds(value: float) -> str:
    return f"{round(value * 1000)}ms"


def parse_ha(
    table: Mapping[str, Any],
    source: str,
    store_url: str | None,
    store_dir: Path,
    base_dir: Path | None = None,
) -> HaSettings:
    """Check ``[ha]``; ``store_url`` is ``[store] url`` (None: the store is SQLite, in
    ``store_dir``); ``base_dir`` anchors the peers' relative TLS files."""
    check_keys(table, _KEYS, source, "ha")
    if "policy" not in table:
        raise ConfigError(source, "ha.policy", "is required")
    text = expect_str(table["policy"], source, "ha.policy")
    try:
        policy = HaPolicy(text)
    except ValueError:
        choices = ", ".join(member.value for member in HaPolicy)
        raise ConfigError(source, "ha.policy", f"expected one of {choices}, got {text!r}") from None
    ping = _positive(table, "lease-ping-time", DEFAULT_PING, source)
    reap = _positive(table, "lease-reap-time", DEFAULT_REAP, source)
    query_timeout = _positive(table, "lease-query-timeout", DEFAULT_QUERY_TIMEOUT, source)
    skew = _positive(table, "max-clock-skew", DEFAULT_MAX_CLOCK_SKEW, source)
    critical = _positive(
        table, "critical-analyzer-timeout", DEFAULT_CRITICAL_ANALYZER_TIMEOUT, source
    )
    replication = quorum = None
    if policy.replicated:
        store_url, replication = _replication(table, source, store_url, policy, base_dir)
        quorum = _quorum(table, source, replication) if store_url is None else None
    else:
        for key in _REPLICATION_KEYS:
            if key in table:
                raise ConfigError(
                    source, f"ha.{key}", f"is for the replication policies, not {text}"
                )
    if not ping < reap / 2:
        raise ConfigError(
            source,
            "ha.lease-ping-time",
            f"must be below half of ha.lease-reap-time ({_seconds(reap)}), got "
            f"{_seconds(ping)}: the lease must survive one failed renewal",
        )
    if not query_timeout < ping:
        raise ConfigError(
            source,
            "ha.lease-query-timeout",
            f"must be below ha.lease-ping-time ({_seconds(ping)}), got "
            f"{_seconds(query_timeout)}: a statement must give up before the next renewal",
        )
    if not critical >= 2 * ping:
        raise ConfigError(
            source,
            "ha.critical-analyzer-timeout",
            f"must be at least twice ha.lease-ping-time ({_seconds(ping)}), got "
            f"{_seconds(critical)}: the reactor is asked to answer once per renewal",
        )
    return HaSettings(
        policy,
        store_url,
        store_dir,
        ping,
        reap,
        query_timeout,
        skew,
        replication,
        critical_timeout=critical,
        quorum=quorum,
    )


def _replication(
    table: Mapping[str, Any],
    source: str,
    store_url: str | None,
    policy: HaPolicy,
    base_dir: Path | None,
) -> tuple[str | None, Replication]:
    """The lease's URL (None: a quorum vote instead) and the replication keys, checked."""
    if store_url is not None:
        raise ConfigError(
            source,
            "ha.policy",
            "replication copies an SQLite store; a PostgreSQL store is shared already: "
            "use shared-store-primary / shared-store-backup",
        )
    for key in ("peers", "cluster-user"):
        if key not in table:
            raise ConfigError(source, f"ha.{key}", "is required with replication")
    url = None
    if "lease-url" in table:
        url = expect_str(table["lease-url"], source, "ha.lease-url")
        if not url.startswith(("postgresql://", "postgres://")):
            raise ConfigError(source, "ha.lease-url", f"expected a postgresql:// URL, got {url!r}")
        for key in _QUORUM_KEYS:
            if key in table:
                raise ConfigError(
                    source, f"ha.{key}", "is for a pair without ha.lease-url (a quorum vote)"
                )
    peers = table["peers"]
    if not isinstance(peers, list) or not peers:
        raise ConfigError(source, "ha.peers", "expected a non-empty list of core acceptor URLs")
    found = tuple(
        expect_url(peer, source, f"ha.peers[{index}]", base_dir) for index, peer in enumerate(peers)
    )
    password = (
        expect_str(table["cluster-password"], source, "ha.cluster-password", empty=True)
        if "cluster-password" in table
        else None
    )
    timeout = _positive(table, "initial-replication-sync-timeout", DEFAULT_SYNC_TIMEOUT, source)
    user = expect_str(table["cluster-user"], source, "ha.cluster-user")
    failback = expect_bool(table.get("allow-failback", False), source, "ha.allow-failback")
    if failback and policy is not HaPolicy.REPLICATION_PRIMARY:
        raise ConfigError(
            source, "ha.allow-failback", "is the primary's: the node to be live again"
        )
    on_shutdown = expect_bool(
        table.get("failover-on-shutdown", True), source, "ha.failover-on-shutdown"
    )
    return url, Replication(found, user, password, timeout, failback, on_shutdown)


def _quorum(table: Mapping[str, Any], source: str, replication: Replication) -> QuorumVote:
    """The quorum keys of a replication pair without ``lease-url``, checked."""
    if not replication.failover_on_shutdown:
        raise ConfigError(
            source,
            "ha.failover-on-shutdown",
            "false needs ha.lease-url: without a lease nothing tells the backup in sync to "
            "wait for the stopped node",
        )
    on_failure = expect_bool(
        table.get("vote-on-replication-failure", False), source, "ha.vote-on-replication-failure"
    )
    size = (
        expect_int(table["quorum-size"], source, "ha.quorum-size", minimum=1)
        if "quorum-size" in table
        else None
    )
    wait = _positive(table, "quorum-vote-wait", DEFAULT_VOTE_WAIT, source)
    return QuorumVote(on_failure, size, wait)


def check_quorum(
    settings: HaSettings, members: int | None, source: str, cluster_user: str | None
) -> None:
    """A quorum pair needs voters: ``members`` (``[cluster] members``, None without
    ``[cluster]``) enough for ``quorum-size``, and the cluster user of ``[ha]`` the one
    the voters know."""
    quorum, replication = settings.quorum, settings.replication
    if quorum is None or replication is None:
        return
    if members is None:
        raise ConfigError(
            source,
            "ha.lease-url",
            "is required unless [cluster] names the members that vote: a replication pair "
            "without a lease decides who is live by their quorum vote",
        )
    needed = quorum.needed(members)
    if needed > members:
        raise ConfigError(
            source,
            "ha.quorum-size",
            f"{needed} grants can never come from the {members} [cluster] members that vote",
        )
    if cluster_user is not None and cluster_user != replication.cluster_user:
        raise ConfigError(
            source,
            "ha.cluster-user",
            f"expected {cluster_user!r}, the [cluster] user: the voters answer the cluster user",
        )
