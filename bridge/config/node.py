"""The node's configuration file: ``[node]``, ``[[acceptor]]``, ``[[address]]``,
``[[address-setting]]``, ``[[bridge]]`` (see :mod:`bridge.config.bridges`), ``[management]``,
``[security]``, ``[store]``, ``[ha]`` and ``[cluster]`` (see :mod:`bridge.config.ha` and
:mod:`bridge.config.cluster`).

Names follow Artemis where a concept matches (``max-size-bytes``, ``address-full-policy``,
``id-cache-size``, ``auto-create-addresses``, ``connection-ttl``), so a user who knows
Artemis can read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import attrs

from bridge.config import units
from bridge.config.bridges import (
    BridgeConfig,
    LoadedBridges,
    load_bridges_dir,
    parse_bridges,
)
from bridge.config.checks import (
    expect_name,
    expect_producer_window,
    expect_size,
    expect_url,
    read_document,
    required,
)
from bridge.config.cluster import ClusterSettings, parse_cluster
from bridge.config.ha import HaSettings, check_quorum, parse_ha
from security import SecuritySettings, load_security
from security.errors import ConfigError
from security.matcher import InvalidPattern, MatchTable, parse_pattern
from security.validate import (
    check_keys,
    expect_bool,
    expect_duration,
    expect_int,
    expect_str,
    expect_table,
    expect_tables,
    key_path,
)
from transport.urls import URL

PROTOCOLS = ("core", "stomp")
UNLIMITED = units.UNLIMITED
DEFAULT_GLOBAL_MAX_SIZE = 64 * 1024 * 1024
DEFAULT_PARTIAL_FRAME_BUDGET = 64 * 1024 * 1024
DEFAULT_MAX_PRELOGIN_FRAME_SIZE = 64 * 1024
DEFAULT_FRAME_TIMEOUT = 30.0
DEFAULT_MAX_DELIVERY_ATTEMPTS = 10
DEFAULT_BRIDGE_CONFIRM_WAIT = 0.05
MAX_BRIDGE_CONFIRM_WAIT = 10.0
"""Artemis's default ``max-delivery-attempts``."""
DEFAULT_READ_SIZE = 64 * 1024
"""An acceptor's ``read-size``: Twisted's own read size (docs/benchmarks.md says why)."""
MAX_READ_SIZE = 16 * 1024 * 1024
_E = TypeVar("_E", bound=StrEnum)


class Routing(StrEnum):
    """How an address routes: one queue of its name, or a queue per subscription."""

    ANYCAST = "anycast"
    MULTICAST = "multicast"


class AddressFullPolicy(StrEnum):
    """What happens when an address holds ``max-size-bytes`` (Artemis's policies)."""

    PAGE = "PAGE"
    BLOCK = "BLOCK"
    FAIL = "FAIL"
    DROP = "DROP"


@attrs.frozen
class Acceptor:
    name: str
    url: URL
    protocols: tuple[str, ...]
    connection_ttl: float
    max_frame_size: int
    producer_window_size: int = 1024 * 1024
    """Producer credit per address the node grants each connection (Artemis's
    ``producer-window-size``); -1: no producer flow control."""
    stomp_prefetch_count: int = 1000
    """A STOMP subscription's unacknowledged messages when its SUBSCRIBE names no
    ``prefetch-count`` (0: no limit)."""
    read_size: int = DEFAULT_READ_SIZE
    """Bytes read from a connection per socket call: a read's frames are all handled
    before other connections are served, so this bounds how long one busy producer holds
    up everyone else's credits and acknowledgements."""
    tcp_no_delay: bool = True
    """Nagle's algorithm off on its connections (Artemis's ``tcpNoDelay``, on by default
    there too), so that small frames are not held for the peer's delayed ACK."""
    stomp_min_large_message_size: int = 100 * 1024
    """A STOMP SEND body from this size (with a ``content-length``) is streamed to the
    large-message store, not held in memory (Artemis's ``stompMinLargeMessageSize``)."""
    stomp_max_message_size: int = 128 * 1024 * 1024
    """The largest STOMP body streamed so (RabbitMQ's ``max_message_size``)."""
    max_prelogin_frame_size: int = DEFAULT_MAX_PRELOGIN_FRAME_SIZE
    """The largest frame a connection may send before it logged in (a CONNECT's worth),
    and what each connection may hold in a partial frame without drawing on the node's
    ``partial-frame-budget``."""
    frame_timeout: float = DEFAULT_FRAME_TIMEOUT
    """Seconds a frame may take from its first byte to its last; a connection that stops
    mid-frame is closed after it, whatever heart-beats it negotiated."""


@attrs.frozen
class AddressSettings:
    """The settings an address works with (see ``NodeConfig.settings_for``)."""

    max_size_bytes: int = UNLIMITED
    address_full_policy: AddressFullPolicy = AddressFullPolicy.PAGE
    id_cache_size: int = 20000
    auto_create_addresses: bool = True
    default_routing: Routing = Routing.ANYCAST
    dead_letter_address: str = ""
    """Where messages delivered ``max_delivery_attempts`` times go ("": none, they are
    dropped), as a consumer's NACK without requeue sends them."""
    max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS
    """Deliveries after which a message returned to its queue goes to the dead-letter
    address instead (-1: no limit)."""


@attrs.frozen
class SettingsOverrides:
    """The settings one ``[[address-setting]]`` or ``[[address]]`` entry sets; None: unset."""

    max_size_bytes: int | None = None
    address_full_policy: AddressFullPolicy | None = None
    id_cache_size: int | None = None
    auto_create_addresses: bool | None = None
    default_routing: Routing | None = None
    dead_letter_address: str | None = None
    max_delivery_attempts: int | None = None

    def apply(self, base: AddressSettings) -> AddressSettings:
        changes = {k: v for k, v in attrs.asdict(self, recurse=False).items() if v is not None}
        return attrs.evolve(base, **changes)


@attrs.frozen
class AddressSettingMatch:
    match: str
    overrides: SettingsOverrides


@attrs.frozen
class Address:
    """A declared address: its routing types (None: the matched default) and its own
    settings."""

    name: str
    routing: frozenset[Routing] | None
    overrides: SettingsOverrides


@attrs.frozen
class Management:
    host: str
    port: int


class StoreType(StrEnum):
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"


@attrs.frozen
class StoreSettings:
    """``[store]``: where durable messages are kept: ``sqlite`` (a file in ``data-dir``,
    the node's data directory unless given: nodes under ``[ha]`` share one) or
    ``postgresql`` (the database at ``url``, ``postgresql://...``)."""

    type: StoreType = StoreType.SQLITE
    url: str | None = None
    directory: Path | None = None
    """``[store] data-dir`` (SQLite only; None: the node's data directory)."""
    bridge_confirm_wait: float = DEFAULT_BRIDGE_CONFIRM_WAIT
    """``[store] bridge-confirm-wait``: seconds a new durable message in flight to core
    bridges waits for their targets' confirmations before it is written (0: none)."""


@attrs.frozen
class NodeConfig:
    """A whole node's configuration, checked."""

    source: Path
    name: str
    data_dir: Path
    acceptors: tuple[Acceptor, ...]
    addresses: tuple[Address, ...]
    address_settings: tuple[AddressSettingMatch, ...]
    management: Management | None
    security: SecuritySettings
    global_max_size: int = DEFAULT_GLOBAL_MAX_SIZE
    """Bytes of messages all addresses together may hold in memory (-1: no limit); at it,
    every address applies its address-full policy, as at its own ``max-size-bytes``."""
    partial_frame_budget: int = DEFAULT_PARTIAL_FRAME_BUDGET
    """Bytes all connections together may hold in partial frames beyond each one's
    ``max-prelogin-frame-size`` (-1: no limit); a connection that would take more is
    closed."""
    bridges: tuple[BridgeConfig, ...] = ()
    """The bridges of the node's own file (see :func:`all_bridges` for the bridges-dir's)."""
    bridges_dir: Path | None = None
    """``[node] bridges-dir``: a folder of ``*.toml`` files of ``[[bridge]]`` tables."""
    store: StoreSettings = StoreSettings()
    ha: HaSettings | None = None
    """``[ha]``: the node takes part in shared-store high availability (docs/ha.md)."""
    cluster: ClusterSettings | None = None
    """``[cluster]``: the node is a member of a cluster (docs/ha.md)."""
    _matches: MatchTable[SettingsOverrides] = attrs.field(init=False, eq=False, repr=False)
    _declared: Mapping[str, Address] = attrs.field(init=False, eq=False, repr=False)

    @property
    def store_dir(self) -> Path:
        """Where an SQLite store keeps its file and large bodies: ``[store] data-dir``, or
        the node's data directory."""
        return self.store.directory or self.data_dir

    def __attrs_post_init__(self) -> None:
        table: MatchTable[SettingsOverrides] = MatchTable(
            (parse_pattern(entry.match), entry.overrides) for entry in self.address_settings
        )
        object.__setattr__(self, "_matches", table)
        object.__setattr__(self, "_declared", {a.name: a for a in self.addresses})

    def settings_for(self, address: str) -> AddressSettings:
        """An address's settings, as Artemis merges them: the defaults, then every matching
        ``[[address-setting]]`` from the broadest to the most specific (each setting only
        what it names), then the address's own ``[[address]]`` keys."""
        settings = AddressSettings()
        for _, overrides in reversed(self._matches.matching(address)):
            settings = overrides.apply(settings)
        declared = self._declared.get(address)
        return declared.overrides.apply(settings) if declared is not None else settings

    def routing_types_for(self, address: str) -> frozenset[Routing]:
        """A declared address's routing types, or the default routing its settings give."""
        declared = self._declared.get(address)
        if declared is not None and declared.routing is not None:
            return declared.routing
        return frozenset({self.settings_for(address).default_routing})

    def routing_for(self, address: str) -> Routing:
        """The routing a send to the address gets when it states none: anycast if the
        address has it (see ``routing_types_for``), else multicast."""
        types = self.routing_types_for(address)
        return Routing.ANYCAST if Routing.ANYCAST in types else Routing.MULTICAST


_TOP = (
    "node",
    "acceptor",
    "address",
    "address-setting",
    "bridge",
    "management",
    "security",
    "store",
    "ha",
    "cluster",
)
_NODE = ("name", "data-dir", "global-max-size", "bridges-dir", "partial-frame-budget")
_ACCEPTOR = (
    "name",
    "url",
    "protocols",
    "connection-ttl",
    "max-frame-size",
    "producer-window-size",
    "stomp-prefetch-count",
    "stomp-min-large-message-size",
    "stomp-max-message-size",
    "read-size",
    "tcp-no-delay",
    "max-prelogin-frame-size",
    "frame-timeout",
)
_SETTING_KEYS = (
    "max-size-bytes",
    "address-full-policy",
    "id-cache-size",
    "auto-create-addresses",
    "default-routing-type",
    "dead-letter-address",
    "max-delivery-attempts",
)
_ADDRESS = (
    "name",
    "routing",
    "max-size-bytes",
    "address-full-policy",
    "id-cache-size",
    "dead-letter-address",
    "max-delivery-attempts",
)
_MANAGEMENT = ("url",)
_STORE = ("type", "url", "data-dir", "bridge-confirm-wait")


def _choice(kind: type[_E], value: object, source: str, key: str) -> _E:
    text = expect_str(value, source, key)
    try:
        return kind(text)
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise ConfigError(source, key, f"expected one of {choices}, got {text!r}") from None


def _overrides(table: Mapping[str, Any], source: str, prefix: str) -> SettingsOverrides:
    changes: dict[str, Any] = {}
    if "max-size-bytes" in table:
        key = key_path(prefix, "max-size-bytes")
        changes["max_size_bytes"] = expect_size(
            table["max-size-bytes"], source, key, unlimited=True
        )
    if "address-full-policy" in table:
        key = key_path(prefix, "address-full-policy")
        changes["address_full_policy"] = _choice(
            AddressFullPolicy, table["address-full-policy"], source, key
        )
    if "id-cache-size" in table:
        key = key_path(prefix, "id-cache-size")
        changes["id_cache_size"] = expect_int(table["id-cache-size"], source, key, minimum=0)
    if "auto-create-addresses" in table:
        key = key_path(prefix, "auto-create-addresses")
        changes["auto_create_addresses"] = expect_bool(table["auto-create-addresses"], source, key)
    if "default-routing-type" in table:
        key = key_path(prefix, "default-routing-type")
        changes["default_routing"] = _choice(Routing, table["default-routing-type"], source, key)
    if "dead-letter-address" in table:
        key = key_path(prefix, "dead-letter-address")
        value = table["dead-letter-address"]
        changes["dead_letter_address"] = "" if value == "" else expect_name(value, source, key)
    if "max-delivery-attempts" in table:
        key = key_path(prefix, "max-delivery-attempts")
        changes["max_delivery_attempts"] = _attempts(table["max-delivery-attempts"], source, key)
    return SettingsOverrides(**changes)


def _attempts(value: object, source: str, key: str) -> int:
    """A number of deliveries: 1 or more, or -1 for no limit."""
    if value == UNLIMITED and not isinstance(value, bool):
        return UNLIMITED
    try:
        return expect_int(value, source, key, minimum=1)
    except ConfigError:
        raise ConfigError(
            source, key, f"expected an integer of at least 1, or -1 for no limit, got {value!r}"
        ) from None


def _acceptor(table: Mapping[str, Any], source: str, prefix: str, base_dir: Path) -> Acceptor:
    check_keys(table, _ACCEPTOR, source, prefix)
    name = expect_name(required(table, "name", source, prefix), source, key_path(prefix, "name"))
    url_key = key_path(prefix, "url")
    url = expect_url(required(table, "url", source, prefix), source, url_key, base_dir)
    protocols_key = key_path(prefix, "protocols")
    protocols = table.get("protocols", ["core"])
    if (
        not isinstance(protocols, list)
        or not protocols
        or any(p not in PROTOCOLS for p in protocols)
    ):
        raise ConfigError(
            source,
            protocols_key,
            f"expected a non-empty array of protocol names from {', '.join(PROTOCOLS)}",
        )
    ttl_key = key_path(prefix, "connection-ttl")
    ttl = expect_duration(table.get("connection-ttl", "60s"), source, ttl_key)
    if ttl <= 0:
        raise ConfigError(source, ttl_key, "expected a duration above zero")
    frame_key = key_path(prefix, "max-frame-size")
    max_frame = expect_size(table.get("max-frame-size", "4MiB"), source, frame_key)
    if not 1024 <= max_frame < 2**32:
        raise ConfigError(source, frame_key, "expected at least 1KiB and below 4GiB")
    window = expect_producer_window(
        table.get("producer-window-size", "1MiB"),
        source,
        key_path(prefix, "producer-window-size"),
        unlimited="no limit",
    )
    prefetch = expect_int(
        table.get("stomp-prefetch-count", 1000),
        source,
        key_path(prefix, "stomp-prefetch-count"),
        minimum=0,
    )
    min_large_key = key_path(prefix, "stomp-min-large-message-size")
    min_large = expect_size(
        table.get("stomp-min-large-message-size", "100KiB"), source, min_large_key
    )
    if min_large < 1:
        raise ConfigError(source, min_large_key, "expected at least 1 byte")
    max_message_key = key_path(prefix, "stomp-max-message-size")
    max_message = expect_size(
        table.get("stomp-max-message-size", "128MiB"), source, max_message_key
    )
    if max_message < min_large:
        raise ConfigError(source, max_message_key, "expected at least stomp-min-large-message-size")
    read_key = key_path(prefix, "read-size")
    read_size = expect_size(table.get("read-size", DEFAULT_READ_SIZE), source, read_key)
    if not 4096 <= read_size <= MAX_READ_SIZE:
        raise ConfigError(source, read_key, "expected at least 4KiB and at most 16MiB")
    no_delay = expect_bool(
        table.get("tcp-no-delay", True), source, key_path(prefix, "tcp-no-delay")
    )
    prelogin_key = key_path(prefix, "max-prelogin-frame-size")
    prelogin = expect_size(
        table.get("max-prelogin-frame-size", min(DEFAULT_MAX_PRELOGIN_FRAME_SIZE, max_frame)),
        source,
        prelogin_key,
    )
    if not 1024 <= prelogin <= max_frame:
        raise ConfigError(source, prelogin_key, "expected at least 1KiB and at most max-frame-size")
    timeout_key = key_path(prefix, "frame-timeout")
    frame_timeout = expect_duration(table.get("frame-timeout", "30s"), source, timeout_key)
    if frame_timeout <= 0:
        raise ConfigError(source, timeout_key, "expected a duration above zero")
    return Acceptor(
        name,
        url,
        tuple(dict.fromkeys(protocols)),
        ttl,
        max_frame,
        window,
        prefetch,
        read_size,
        no_delay,
        min_large,
        max_message,
        prelogin,
        frame_timeout,
    )


def _address(table: Mapping[str, Any], source: str, prefix: str) -> Address:
    check_keys(table, _ADDRESS, source, prefix)
    name = expect_name(required(table, "name", source, prefix), source, key_path(prefix, "name"))
    routing = _routing_types(table["routing"], source, prefix) if "routing" in table else None
    return Address(name, routing, _overrides(table, source, prefix))


def _routing_types(value: object, source: str, prefix: str) -> frozenset[Routing]:
    """An address's ``routing``: one routing type, or a list of one or both."""
    key = key_path(prefix, "routing")
    if not isinstance(value, list):
        return frozenset({_choice(Routing, value, source, key)})
    types = [_choice(Routing, each, source, key_path(key, at)) for at, each in enumerate(value)]
    if not types or len(set(types)) != len(types):
        why = f"expected a list of distinct routing types (anycast, multicast), got {value!r}"
        raise ConfigError(source, key, why)
    return frozenset(types)


def _address_setting(table: Mapping[str, Any], source: str, prefix: str) -> AddressSettingMatch:
    check_keys(table, ("match", *_SETTING_KEYS), source, prefix)
    match = expect_str(required(table, "match", source, prefix), source, key_path(prefix, "match"))
    try:
        parse_pattern(match)
    except InvalidPattern as error:
        raise ConfigError(source, key_path(prefix, "match"), str(error)) from None
    return AddressSettingMatch(match, _overrides(table, source, prefix))


def _management(table: Mapping[str, Any], source: str) -> Management:
    check_keys(table, _MANAGEMENT, source, "management")
    key = "management.url"
    text = expect_str(required(table, "url", source, "management"), source, key)
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as error:
        raise ConfigError(
            source, key, f"expected http://HOST:PORT, got {text!r} ({error})"
        ) from None
    if parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("", "/"):
        raise ConfigError(source, key, f"expected http://HOST:PORT, got {text!r}")
    return Management(parts.hostname, port)


def _store(table: Mapping[str, Any], source: str, config_file: Path) -> StoreSettings:
    check_keys(table, _STORE, source, "store")
    kind = _choice(StoreType, table.get("type", "sqlite"), source, "store.type")
    wait = DEFAULT_BRIDGE_CONFIRM_WAIT
    if "bridge-confirm-wait" in table:
        wait = expect_duration(table["bridge-confirm-wait"], source, "store.bridge-confirm-wait")
        if wait > MAX_BRIDGE_CONFIRM_WAIT:
            raise ConfigError(
                source,
                "store.bridge-confirm-wait",
                f"at most {MAX_BRIDGE_CONFIRM_WAIT:g}s (a producer's receipt may wait this "
                f"long), got {table['bridge-confirm-wait']!r}",
            )
    if kind is StoreType.SQLITE:
        if "url" in table:
            raise ConfigError(source, "store.url", 'is only for type = "postgresql"')
        if "data-dir" in table:
            directory = _path(table["data-dir"], source, "store.data-dir", config_file)
            return StoreSettings(directory=directory, bridge_confirm_wait=wait)
        return StoreSettings(bridge_confirm_wait=wait)
    if "data-dir" in table:
        raise ConfigError(source, "store.data-dir", 'is only for type = "sqlite"')
    # The URL itself is checked when the node starts, by the PostgreSQL client's rules.
    url = expect_str(required(table, "url", source, "store"), source, "store.url")
    return StoreSettings(kind, url, bridge_confirm_wait=wait)


def _path(value: object, source: str, key: str, config_file: Path) -> Path:
    """A path, relative to the configuration file's folder unless absolute."""
    return config_file.parent / expect_str(value, source, key)


def _unique(names: list[str], source: str, section: str) -> None:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            raise ConfigError(
                source, key_path(key_path(section, index), "name"), f"duplicate name {name!r}"
            )
        seen.add(name)


def parse_node_config(document: Mapping[str, Any], path: Path) -> NodeConfig:
    """Check a parsed TOML document; relative paths are relative to its folder."""
    source = str(path)
    check_keys(document, _TOP, source, "")
    node = expect_table(required(document, "node", source, ""), source, "node")
    check_keys(node, _NODE, source, "node")
    name = expect_name(required(node, "name", source, "node"), source, "node.name")
    data_dir = _path(required(node, "data-dir", source, "node"), source, "node.data-dir", path)
    bridges_dir = (
        _path(node["bridges-dir"], source, "node.bridges-dir", path)
        if "bridges-dir" in node
        else None
    )
    acceptors_table = expect_tables(document.get("acceptor", []), source, "acceptor")
    acceptors = [
        _acceptor(entry, source, key_path("acceptor", index), path.parent)
        for index, entry in enumerate(acceptors_table)
    ]
    _unique([a.name for a in acceptors], source, "acceptor")
    settings_table = expect_tables(document.get("address-setting", []), source, "address-setting")
    address_settings = tuple(
        _address_setting(entry, source, key_path("address-setting", index))
        for index, entry in enumerate(settings_table)
    )
    addresses_table = expect_tables(document.get("address", []), source, "address")
    addresses = [
        _address(entry, source, key_path("address", index))
        for index, entry in enumerate(addresses_table)
    ]
    _unique([a.name for a in addresses], source, "address")
    bridges = parse_bridges(document.get("bridge", []), source, path.parent)
    _unique([b.name for b in bridges], source, "bridge")
    management = (
        _management(expect_table(document["management"], source, "management"), source)
        if "management" in document
        else None
    )
    security_table = expect_table(document.get("security", {"enabled": False}), source, "security")
    security = load_security(security_table, source, base_dir=path.parent)
    store = (
        _store(expect_table(document["store"], source, "store"), source, path)
        if "store" in document
        else StoreSettings()
    )
    ha = (
        parse_ha(
            expect_table(document["ha"], source, "ha"),
            source,
            store.url,
            store.directory or data_dir,
            path.parent,
        )
        if "ha" in document
        else None
    )
    cluster = (
        parse_cluster(
            expect_table(document["cluster"], source, "cluster"), source, path.parent, security
        )
        if "cluster" in document
        else None
    )
    if ha is not None:
        members = len(cluster.members) if cluster is not None else None
        check_quorum(ha, members, source, cluster.user if cluster is not None else None)
        if cluster is not None and cluster.store is None and ha.policy.backup:
            raise ConfigError(
                source,
                "cluster.store",
                f"is required with ha.policy {ha.policy.value!r}: a backup serves the store "
                "it takes over, which its live node's clients ask for by that name (the "
                "primary's name, as the primary serves it under its own)",
            )
    global_max = (
        expect_size(node["global-max-size"], source, "node.global-max-size", unlimited=True)
        if "global-max-size" in node
        else DEFAULT_GLOBAL_MAX_SIZE
    )
    partial_budget = expect_size(
        node.get("partial-frame-budget", DEFAULT_PARTIAL_FRAME_BUDGET),
        source,
        "node.partial-frame-budget",
        unlimited=True,
    )
    return NodeConfig(
        source=path,
        name=name,
        data_dir=data_dir,
        acceptors=tuple(acceptors),
        addresses=tuple(addresses),
        address_settings=address_settings,
        management=management,
        security=security,
        global_max_size=global_max,
        partial_frame_budget=partial_budget,
        bridges=bridges,
        bridges_dir=bridges_dir,
        store=store,
        ha=ha,
        cluster=cluster,
    )


def load_node_config(path: Path) -> NodeConfig:
    """Read and check a node's TOML file."""
    return parse_node_config(read_document(path), path)


def all_bridges(config: NodeConfig) -> LoadedBridges:
    """The node file's bridges, then those of its bridges-dir: a bad bridge file's error
    instead of its bridges, and an error instead of each bridge whose name came before."""
    own = LoadedBridges(config.bridges)
    if config.bridges_dir is None:
        return own
    return own.then(load_bridges_dir(config.bridges_dir))
