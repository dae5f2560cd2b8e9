"""Core bridges' configuration: ``[[bridge]]`` tables, in the node's file or in the
``*.toml`` files of its ``bridges-dir``.

Names follow Artemis's core bridges (``confirmation-window-size``, ``retry-interval``,
``retry-interval-multiplier``, ``max-retry-interval``, ``reconnect-attempts``,
``use-duplicate-detection``, ``concurrency``), so a user who knows Artemis can read it.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import attrs

from bridge.config.checks import (
    expect_name,
    expect_producer_window,
    expect_size,
    expect_url,
    read_document,
    required,
)
from bridge.config.units import UNLIMITED
from bridge.message import Message
from bridge.selector import SelectorError, compile_selector
from security.errors import ConfigError
from security.validate import (
    check_keys,
    describe,
    expect_bool,
    expect_duration,
    expect_int,
    expect_number,
    expect_str,
    expect_tables,
    key_path,
)
from transport.urls import URL

Transformer = Callable[[Message], Message]
"""Called with each message before it is forwarded; returns the message to forward."""


@attrs.frozen
class BridgeConfig:
    """One bridge, checked. ``source`` and ``key`` (``bridge[2]``) say where it was
    declared, so a runtime error (a missing queue) names the file and key too."""

    name: str
    queue: str
    targets: tuple[URL, ...]
    """The primary target, then its backups, in failover order."""
    source: str
    key: str
    forwarding_address: str | None = None
    """None: each message goes to its own address."""
    filter: str | None = None
    transformer: Transformer | None = attrs.field(default=None, eq=False)
    transformer_name: str | None = None
    user: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    confirmation_window_size: int = 1024 * 1024
    producer_window_size: int = 1024 * 1024
    """The most producer credit the bridge uses per address (-1: whatever the target
    grants)."""
    min_large_message_size: int = 100 * 1024
    retry_interval: float = 2.0
    retry_interval_multiplier: float = 1.0
    max_retry_interval: float = 2.0
    reconnect_attempts: int = -1
    use_duplicate_detection: bool = True
    concurrency: int = 1
    pending_ack_timeout: float = 60.0
    """How long pause and stop wait for outstanding confirmations before returning the
    unconfirmed messages to the queue."""


def _targets(value: object, source: str, key: str, base_dir: Path | None) -> tuple[URL, ...]:
    if isinstance(value, str):
        return (expect_url(value, source, key, base_dir),)
    if isinstance(value, list) and value:
        return tuple(
            expect_url(item, source, key_path(key, i), base_dir) for i, item in enumerate(value)
        )
    got = "an empty array" if value == [] else describe(value)
    raise ConfigError(source, key, f"expected a URL or a non-empty array of URLs, got {got}")


def _filter(value: object, source: str, key: str) -> str:
    text = expect_str(value, source, key)
    try:
        compile_selector(text)
    except SelectorError as error:
        raise ConfigError(source, key, str(error)) from None
    return text


def _transformer(value: object, source: str, key: str) -> Transformer:
    """The callable a ``"package.module:function"`` string names, imported now."""
    text = expect_str(value, source, key)
    module_name, _, attribute = text.partition(":")
    if not module_name or not attribute:
        raise ConfigError(source, key, f"expected 'package.module:function', got {text!r}")
    try:
        found: object = importlib.import_module(module_name)
    except Exception as error:  # the module's own code may raise anything
        raise ConfigError(
            source, key, f"cannot import {module_name!r}: {type(error).__name__}: {error}"
        ) from None
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ConfigError(source, key, f"module {module_name!r} has no {attribute!r}") from None
    if not callable(found):
        raise ConfigError(source, key, f"{text!r} is not callable (it is a {type(found).__name__})")
    return cast(Transformer, found)


def _window(value: object, source: str, key: str) -> int:
    size = expect_size(value, source, key)
    if not 1 <= size < 2**32:
        raise ConfigError(source, key, "expected 1 byte to below 4GiB")
    return size


def _at_least_a_byte(value: object, source: str, key: str) -> int:
    size = expect_size(value, source, key)
    if size < 1:
        raise ConfigError(source, key, "expected at least 1 byte")
    return size


def _interval(value: object, source: str, key: str) -> float:
    seconds = expect_duration(value, source, key)
    if seconds <= 0:
        raise ConfigError(source, key, "expected a duration above zero")
    return seconds


def _multiplier(value: object, source: str, key: str) -> float:
    number = expect_number(value, source, key, minimum=1.0)
    if not math.isfinite(number):
        raise ConfigError(source, key, f"expected a finite number, got {number}")
    return number


_OPTIONAL: Mapping[str, Callable[[object, str, str], object]] = {
    "forwarding-address": expect_str,
    "filter": _filter,
    "user": expect_str,
    "password": functools.partial(expect_str, empty=True),
    "confirmation-window-size": _window,
    "producer-window-size": functools.partial(
        expect_producer_window, unlimited="what the target grants"
    ),
    "min-large-message-size": _at_least_a_byte,
    "retry-interval": _interval,
    "retry-interval-multiplier": _multiplier,
    "max-retry-interval": _interval,
    "reconnect-attempts": functools.partial(expect_int, minimum=UNLIMITED),
    "use-duplicate-detection": expect_bool,
    "concurrency": functools.partial(expect_int, minimum=1),
    "pending-ack-timeout": _interval,
}
"""Each optional key but ``transformer``, and its check; the attribute is the key with
``_`` for ``-``."""
_KEYS = ("name", "queue", "target", "transformer", *_OPTIONAL)


def parse_bridge(
    table: Mapping[str, Any], source: str, key: str, base_dir: Path | None = None
) -> BridgeConfig:
    """One ``[[bridge]]`` table, checked; ``key`` is where it is (``bridge[0]``) and
    ``base_dir`` the folder relative ``tls://`` file options are taken from."""
    check_keys(table, _KEYS, source, key)
    values: dict[str, Any] = {
        name.replace("-", "_"): check(table[name], source, key_path(key, name))
        for name, check in _OPTIONAL.items()
        if name in table
    }
    if "transformer" in table:
        where = key_path(key, "transformer")
        values["transformer"] = _transformer(table["transformer"], source, where)
        values["transformer_name"] = table["transformer"]
    config = BridgeConfig(
        name=expect_name(required(table, "name", source, key), source, key_path(key, "name")),
        queue=expect_str(required(table, "queue", source, key), source, key_path(key, "queue")),
        targets=_targets(
            required(table, "target", source, key), source, key_path(key, "target"), base_dir
        ),
        source=source,
        key=key,
        **values,
    )
    if "max-retry-interval" not in table:
        longest = max(config.max_retry_interval, config.retry_interval)
        return attrs.evolve(config, max_retry_interval=longest)
    if config.max_retry_interval < config.retry_interval:
        raise ConfigError(
            source,
            key_path(key, "max-retry-interval"),
            f"expected at least retry-interval ({config.retry_interval:g}s), "
            f"got {config.max_retry_interval:g}s",
        )
    return config


def parse_bridges(
    value: object, source: str, base_dir: Path | None = None
) -> tuple[BridgeConfig, ...]:
    """A document's ``[[bridge]]`` tables (its ``bridge`` array), checked."""
    tables = expect_tables(value, source, "bridge")
    return tuple(
        parse_bridge(table, source, key_path("bridge", index), base_dir)
        for index, table in enumerate(tables)
    )


def load_bridge_file(path: Path) -> tuple[BridgeConfig, ...]:
    """A bridges-dir file: ``[[bridge]]`` tables and nothing else."""
    document = read_document(path)
    check_keys(document, ("bridge",), str(path), "")
    return parse_bridges(document.get("bridge", []), str(path), path.parent)


@attrs.frozen
class LoadedBridges:
    """Bridges that can start, and the errors of those that cannot."""

    bridges: tuple[BridgeConfig, ...] = ()
    errors: tuple[ConfigError, ...] = ()

    def then(self, more: LoadedBridges) -> LoadedBridges:
        """These, then ``more``'s: each bridge of ``more`` whose name came before is left
        out, with an error naming where it is and where the name was first declared."""
        first = {bridge.name: bridge for bridge in self.bridges}
        kept: list[BridgeConfig] = []
        repeated: list[ConfigError] = []
        for bridge in more.bridges:
            earlier = first.setdefault(bridge.name, bridge)
            if earlier is bridge:
                kept.append(bridge)
                continue
            repeated.append(
                ConfigError(
                    bridge.source,
                    key_path(bridge.key, "name"),
                    f"duplicate bridge name {bridge.name!r} "
                    f"(first declared in {earlier.source} {earlier.key})",
                )
            )
        return LoadedBridges((*self.bridges, *kept), (*self.errors, *more.errors, *repeated))


def load_bridges_dir(path: Path) -> LoadedBridges:
    """Every ``*.toml`` file of ``path`` (hidden ones aside), in name order: a file with a
    mistake gives its first error and none of its bridges; the other files load."""
    try:
        files = sorted(
            p for p in path.iterdir() if p.suffix == ".toml" and not p.name.startswith(".")
        )
    except OSError as error:
        return LoadedBridges(
            errors=(ConfigError(str(path), "", f"cannot be read: {error.strerror or error}"),)
        )
    loaded = LoadedBridges()
    for file in files:
        try:
            found = LoadedBridges(load_bridge_file(file))
        except ConfigError as error:
            found = LoadedBridges(errors=(error,))
        loaded = loaded.then(found)
    return loaded
