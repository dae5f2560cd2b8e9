"""A node's bridges: started with the node, reloaded from their files, operated by name.

``start`` and ``resume`` answer once the bridge is on its way (STARTING: its target may
be down for a while); ``pause`` and ``stop`` once it is PAUSED or STOPPED, which is when
its unconfirmed messages are back on its queue.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from bridge.client.api import NO_RECONNECT, Client, connect
from bridge.config.bridges import BridgeConfig
from bridge.forward.bridge import Bridge, Connector
from bridge.forward.forwarded import Origin
from bridge.forward.interfaces import IBridges, UnknownBridge
from bridge.forward.status import BridgeSnapshot
from bridge.node.broker import Broker
from transport.urls import URL

log = Logger()


class Loaded(Protocol):
    """What the bridge files gave: the bridges, and the errors of the files that could
    not be used (each names its file as ``source``)."""

    @property
    def bridges(self) -> Sequence[BridgeConfig]: ...

    @property
    def errors(self) -> Sequence[Any]: ...


def client_connector(reactor: Any, node_name: str) -> Connector:
    """Opens a bridge's connections with the core client: one attempt each (the bridge
    retries), logged in as the bridge's user."""

    def open_client(url: URL, config: BridgeConfig) -> Deferred[Client]:
        connecting: Deferred[Client] = connect(
            reactor,
            url,
            user=config.user,
            password=config.password,
            client_id=f"bridge {config.name} of node {node_name}",
            confirmation_window_size=config.confirmation_window_size,
            min_large_message_size=config.min_large_message_size,
            producer_window_size=config.producer_window_size,
            reconnect=NO_RECONNECT,
        )
        return connecting

    return open_client


@implementer(IBridges)
class Bridges:
    """Every bridge of one node, by name."""

    def __init__(
        self,
        broker: Broker,
        node_id: str,
        clock: IReactorTime,
        connector: Connector,
        load: Callable[[], Loaded],
    ) -> None:
        self._broker = broker
        self._origin = Origin(node_id, uuid.uuid4().hex[:12])
        self._clock = clock
        self._connector = connector
        self._load = load
        self._bridges: dict[str, Bridge] = {}

    def start_all(self) -> list[str]:
        """Load the bridge files and start every bridge; the files' errors, one line each."""
        loaded = self._load()
        for config in loaded.bridges:
            self._add(config)
        errors = [str(error) for error in loaded.errors]
        for error in errors:
            log.error("bridge file not used: {error}", error=error)
        return errors

    def stop_all(self) -> Deferred[None]:
        """Stop every bridge (node shutdown): fires once all are STOPPED."""
        bridges, self._bridges = self._bridges, {}
        stopping = DeferredList([bridge.stop() for bridge in bridges.values()], consumeErrors=True)
        return stopping.addCallback(lambda _: None)

    def _add(self, config: BridgeConfig) -> None:
        bridge = Bridge(config, self._broker, self._origin, self._clock, self._connector)
        self._bridges[config.name] = bridge
        bridge.start().addErrback(lambda _: None)  # a failure shows in its status

    def _bridge(self, name: str) -> Bridge:
        try:
            return self._bridges[name]
        except KeyError:
            raise UnknownBridge(name) from None

    # -- IBridges -----------------------------------------------------------------------

    def snapshots(self) -> list[BridgeSnapshot]:
        return [self._bridges[name].snapshot() for name in sorted(self._bridges)]

    def start(self, name: str) -> Deferred[None]:
        return self._on_its_way(name, Bridge.start)

    def resume(self, name: str) -> Deferred[None]:
        return self._on_its_way(name, Bridge.resume)

    def _on_its_way(
        self, name: str, operation: Callable[[Bridge], Deferred[None]]
    ) -> Deferred[None]:
        try:
            bridge = self._bridge(name)
        except UnknownBridge as unknown:
            return fail(unknown)
        done = operation(bridge)
        if done.called:
            return done
        done.addErrback(lambda _: None)  # a later failure shows in its status
        return succeed(None)

    def stop(self, name: str) -> Deferred[None]:
        try:
            return self._bridge(name).stop()
        except UnknownBridge as unknown:
            return fail(unknown)

    def pause(self, name: str) -> Deferred[None]:
        try:
            return self._bridge(name).pause()
        except UnknownBridge as unknown:
            return fail(unknown)

    def reload(self) -> Deferred[list[str]]:
        loaded = self._load()
        unreadable = {getattr(error, "source", None) for error in loaded.errors}
        wanted = {config.name: config for config in loaded.bridges}
        changes: list[Deferred[Any]] = []
        restarting: set[str] = set()
        for name, bridge in list(self._bridges.items()):
            config = wanted.get(name)
            if config is None and bridge.config.source in unreadable:
                continue  # its file could not be read this time: it keeps running
            if config is None or config != bridge.config:
                del self._bridges[name]
                restarting.add(name)
                log.info("bridge {name}: stopping for the reload", name=name)
                changes.append(bridge.stop().addBoth(self._restart, config))
        for name, config in wanted.items():
            if name not in self._bridges and name not in restarting:
                self._add(config)
        errors = [str(error) for error in loaded.errors]
        return DeferredList(changes, consumeErrors=True).addCallback(lambda _: errors)

    def _restart(self, _: object, config: BridgeConfig | None) -> None:
        if config is not None:
            self._add(config)
