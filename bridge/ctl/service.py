"""A node as a Twisted service: the store, the broker, the acceptors, the management API
and the bridges, started in that order and stopped in the reverse one (the bridges first,
so their unconfirmed messages are back on their queues before anything closes).

Start-up first checks, creating nothing, that the data directory and the security files
can be used (:mod:`bridge.ctl.preflight`), then opens the store (recovering every queue),
then listens; if any step fails (a port in use, an unreadable certificate), what started is
stopped again, the failure is logged naming the acceptor or path, and the process ends with
status 1: nothing half-starts.

Shutdown (SIGTERM, SIGINT, or ``stopService``) closes the acceptors and the management
port, ends every connection (their unacknowledged deliveries return to their queues and
open transactions roll back), lets the store finish its writes, and closes it.

SIGHUP (when the service is asked to listen for it, as twistd's is) reloads what can
change while the node runs: the configuration file is read again, the bridges, the users
files and the security settings are replaced, and a log line says what was reloaded and
which other changes wait for a restart.

The management API's module (Twisted's HTTP server and the Prometheus client, about 4 MiB
of a node's memory) is imported only by a node whose configuration has ``[management]``.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from twisted.application.service import Service
from twisted.internet import endpoints
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IListeningPort
from twisted.logger import Logger
from twisted.python.failure import Failure

from bridge.config.node import Acceptor, NodeConfig, StoreType, all_bridges, load_node_config
from bridge.ctl.auditlog import route_audit_log
from bridge.ctl.drain import NodeDrain
from bridge.ctl.ha import HaNode
from bridge.ctl.members import ClusterMembers
from bridge.ctl.preflight import check_startable
from bridge.ctl.replication import NodeReplication
from bridge.forward.manager import Bridges, client_connector
from bridge.ha.activation import HaState
from bridge.heads.core import CoreHead
from bridge.heads.stomp import StompHead, StompSettings
from bridge.heads.stomp.frames import Limits
from bridge.logins import Logins
from bridge.node.broker import Broker
from bridge.replication.vote import Login, Voter
from bridge.store import Fenced, MessageStore, SQLiteMessageStore
from bridge.store.sqlite import FILENAME as SQLITE_FILENAME
from security import SecurityStore
from security.errors import ConfigError
from transport.allocator import tune_allocator
from transport.partial import PartialFrameBudget, PartialFrameLimits
from transport.settings import ConnectionSettings

if TYPE_CHECKING:
    from twisted.web.server import Site

    from bridge.ctl.management import Serving

log = Logger()

NODE_ID_FILE = "node-id"

RELOADABLE = frozenset({"source", "bridges", "bridges_dir", "security"})
"""The parts of a node's configuration a reload replaces; a change to any other needs a
restart."""


class StartupError(Exception):
    """The node could not start; the message names what."""


def node_id(data_dir: Path) -> str:
    """The node's id, kept in its data directory so it survives restarts."""
    path = data_dir / NODE_ID_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        data_dir.mkdir(parents=True, exist_ok=True)
        value = str(uuid.uuid4())
        temporary = path.with_suffix(".tmp")
        temporary.write_text(value + "\n")
        temporary.replace(path)
        return value


def advertised_urls(config: NodeConfig) -> tuple[str, ...]:
    """The URLs a member gives its cluster and its clients: its core acceptors', as
    configured (so they name a host clients reach and a fixed port)."""
    return tuple(str(a.url) for a in config.acceptors if a.protocols == ("core",))


def partial_frame_limits(
    acceptor: Acceptor, budget: PartialFrameBudget | None
) -> PartialFrameLimits:
    """How an acceptor bounds frames not yet whole, drawing on the node-wide ``budget``."""
    return PartialFrameLimits(acceptor.max_prelogin_frame_size, acceptor.frame_timeout, budget)


def partial_frame_budget(config: NodeConfig) -> PartialFrameBudget:
    """The node-wide budget of bytes in partial frames (``[node] partial-frame-budget``)."""
    limit = config.partial_frame_budget
    return PartialFrameBudget(None if limit < 0 else limit)


def stomp_settings(acceptor: Acceptor) -> StompSettings:
    """A STOMP acceptor's settings: bodies held whole up to its max-frame-size, streamed
    from its stomp-min-large-message-size up to its stomp-max-message-size, heart-beats
    offered at a third of its TTL (as the core transport pings)."""
    return StompSettings(
        limits=Limits(
            max_body=acceptor.max_frame_size,
            min_large=acceptor.stomp_min_large_message_size,
            max_large=acceptor.stomp_max_message_size,
        ),
        ttl=acceptor.connection_ttl,
        heart_beat=acceptor.connection_ttl / 3,
        prefetch=acceptor.stomp_prefetch_count,
        read_size=acceptor.read_size,
        tcp_no_delay=acceptor.tcp_no_delay,
    )


def connection_settings(
    acceptor: Acceptor, budget: PartialFrameBudget | None = None
) -> ConnectionSettings:
    """The transport settings of an acceptor's connections (heartbeats at a third of
    the TTL, so two can be lost before the peer gives up)."""
    return ConnectionSettings(
        max_frame_size=acceptor.max_frame_size,
        ttl=acceptor.connection_ttl,
        heartbeat_interval=acceptor.connection_ttl / 3,
        read_size=acceptor.read_size,
        tcp_no_delay=acceptor.tcp_no_delay,
        partial_frames=partial_frame_limits(acceptor, budget),
    )


def replica_link_settings(config: NodeConfig) -> ConnectionSettings | None:
    """A backup's link to its live node pings at a third of the node's own core
    acceptor's connection-ttl, as that acceptor's clients are asked to: the live node
    drops a backup silent for its connection-ttl, and the nodes of a pair are configured
    alike (None, the transport's defaults, without a core acceptor)."""
    for acceptor in config.acceptors:
        if acceptor.protocols == ("core",):
            ttl = acceptor.connection_ttl
            return ConnectionSettings(ttl=ttl, heartbeat_interval=ttl / 3)
    return None


class NodeService(Service):
    """One node, from its configuration."""

    def __init__(
        self,
        config: NodeConfig,
        reactor: Any,
        *,
        exit_on_failure: bool = True,
        reload_on_hangup: bool = False,
    ) -> None:
        self.config = config
        self.reactor = reactor
        self.exit_on_failure = exit_on_failure
        self.reload_on_hangup = reload_on_hangup
        self._bridges_from = config
        """The configuration the bridges are read from: the last one a reload read."""
        self.broker: Broker | None = None
        self.security: SecurityStore | None = None
        self.head: CoreHead | None = None
        self.stomp: StompHead | None = None
        self.bridges: Bridges | None = None
        self.ha: HaNode | None = None
        """With ``[ha]``: the node's activation on the lease."""
        self.replication: NodeReplication | None = None
        """With ``[ha]`` replication: the copy of the store, to or from this node."""
        self.members: ClusterMembers | None = None
        """With ``[cluster]``, while serving: the node's view of its cluster."""
        self.drain: NodeDrain | None = None
        """Without ``[ha]``: the node's graceful drain (docs/ha.md)."""
        cluster = config.cluster
        self.voter = (
            Voter(reactor, Login(cluster.user, cluster.password, f"voter {config.name}"))
            if cluster is not None
            else None
        )
        """With ``[cluster]``: this node's vote for replication pairs without a lease."""
        self.ports: dict[str, IListeningPort] = {}
        self.started: Deferred[None] = Deferred()
        """Fires once the node listens; fails with StartupError if it cannot."""
        self._starting: Deferred[None] | None = None
        self._stopping: Deferred[None] | None = None
        self._unroute_audit: Callable[[], None] | None = None

    def startService(self) -> None:
        super().startService()  # type: ignore[no-untyped-call]
        self._stopping = None
        if self._unroute_audit is None:
            self._unroute_audit = route_audit_log(self.reactor)
        if self.reload_on_hangup:
            signal.signal(signal.SIGHUP, self._hangup)
        tune_allocator()
        self._starting = Deferred.fromCoroutine(self._start())
        self._starting.addCallbacks(self.started.callback, self._failed)

    async def _start(self) -> None:
        check_startable(self.config)
        if self.config.ha is None:
            await self._activate()
            return
        # A node with [ha] opens nothing until it holds the lease (docs/ha.md).
        self.ha = HaNode(
            self.config.name,
            self.config.ha,
            self.reactor,
            activate=self._activate,
            deactivate=self._deactivate,
            failed=self._activation_failed,
            cluster=self.config.cluster,
        )
        config = self.config
        assert config.ha is not None
        if config.ha.replication is not None:
            self.replication = NodeReplication(
                config.name,
                Path(config.store_dir) / SQLITE_FILENAME,
                config.ha.replication,
                self.ha,
                self.reactor,
                link=replica_link_settings(config),
            )
        if config.management is not None:
            # Open from the start, so that a backup answers /status too.
            from bridge.ctl.management import NodeView, view_site  # noqa: PLC0415 (see the docstring)

            security = SecurityStore(config.security, self.reactor.seconds)
            view = NodeView(
                config.name,
                node_id(config.data_dir),
                self.reactor,
                self.reactor.seconds(),
                self._serving,
                ha=self.ha.status,
                failover=self.ha.failover,
            )
            await self._listen_management(view_site(view, security))
            log.info(
                "node {name}: management on {where}",
                name=config.name,
                where=_where(self.ports["management"]),
            )
        self.ha.start()
        if self.replication is not None:
            self.replication.as_backup()

    async def _listen_management(self, site: Site) -> None:
        where = self.config.management
        assert where is not None
        endpoint = endpoints.TCP4ServerEndpoint(self.reactor, where.port, interface=where.host)
        self.ports["management"] = await _listening(
            f"management at http://{where.host}:{where.port}", endpoint.listen(site)
        )

    def _serving(self) -> Serving | None:
        """What the node serves now, for the management API of a node with [ha]."""
        broker, head, stomp = self.broker, self.head, self.stomp
        if broker is None or head is None or stomp is None:
            return None
        from bridge.ctl.management import Serving  # noqa: PLC0415 (see the docstring)

        return Serving(
            broker,
            lambda: head.connections + stomp.connections,
            lambda: head.producers_blocked + stomp.producers_blocked,
            self.bridges,
        )

    async def _activate(self) -> None:
        """Load the store, listen, start the bridges: the node serves."""
        config = self.config
        if self.replication is not None:
            await self.replication.activating()
        self.security = security = SecurityStore(config.security, self.reactor.seconds)
        identity = node_id(config.data_dir)
        store = _store(config, self.reactor, self.ha)
        broker = Broker(config, store)
        try:
            await broker.open()
        except Fenced:
            raise  # the lease moved on while loading: the HA glue fences
        except Exception as error:
            if config.store.type is StoreType.POSTGRESQL:
                raise StartupError(f"store.url: {error}") from error
            raise StartupError(f"the store {store.name}: {error}") from error
        self.broker = broker
        logins = Logins(self.reactor, security)  # one bound on hashing for every protocol
        self.head = head = CoreHead(
            broker,
            security,
            node_name=config.name,
            node_id=identity,
            reactor=self.reactor,
            logins=logins,
        )
        self.stomp = stomp = StompHead(broker, security, reactor=self.reactor, logins=logins)
        head.voter = self.voter
        if self.replication is not None:
            self.replication.live(store, head)
        if config.cluster is not None:
            head.cluster = self.members = ClusterMembers(
                config.name,
                config.cluster,
                config.cluster.store or config.name,
                advertised_urls(config),
                head=head,
                reactor=self.reactor,
            )
        budget = partial_frame_budget(config)
        for acceptor in config.acceptors:
            if len(acceptor.protocols) > 1:
                raise StartupError(
                    f"acceptor {acceptor.name!r}: one acceptor serves one protocol; give "
                    f"each of {', '.join(acceptor.protocols)} an acceptor of its own"
                )
            what = f"acceptor {acceptor.name!r} at {acceptor.url}"
            if acceptor.protocols == ("stomp",):
                listening = stomp.listen(
                    acceptor.url,
                    settings=stomp_settings(acceptor),
                    partial_frames=partial_frame_limits(acceptor, budget),
                )
            else:
                listening = head.listen(
                    acceptor.url,
                    settings=connection_settings(acceptor, budget),
                    producer_window_size=acceptor.producer_window_size,
                )
            self.ports[acceptor.name] = await _listening(what, listening)
        self.bridges = bridges = Bridges(
            broker,
            identity,
            self.reactor,
            client_connector(self.reactor, config.name),
            lambda: all_bridges(self._bridges_from),
        )
        if config.management is not None and self.ha is None:
            self.drain = NodeDrain(
                config.name,
                identity,
                config.cluster,
                broker,
                self.reactor,
                members=self.members,
                close=lambda: Deferred.fromCoroutine(self._stop_accepting()),
                stop=self.reactor.stop,
            )
            from bridge.ctl.management import management_site  # noqa: PLC0415 (see the docstring)

            site = management_site(
                broker,
                security,
                node_id=identity,
                reactor=self.reactor,
                connections=lambda: head.connections + stomp.connections,
                producers_blocked=lambda: head.producers_blocked + stomp.producers_blocked,
                bridges=bridges,
                logins=logins,
                drain=self.drain,
            )
            await self._listen_management(site)
        bridges.start_all()
        if self.members is not None:
            self.members.start()
        log.info(
            "node {name} ({id}) started: {ports}",
            name=config.name,
            id=identity,
            ports=", ".join(f"{name} on {_where(port)}" for name, port in self.ports.items()),
        )

    async def _stop_accepting(self) -> None:
        """For a drain: close the acceptors (the management port stays) and end every
        client connection; their reconnects take the clients to their other URLs."""
        ports = {name: port for name, port in self.ports.items() if name != "management"}
        self.ports = {name: port for name, port in self.ports.items() if name == "management"}
        for port in ports.values():
            await _stopped(port)
        if self.head is not None:
            await self.head.close_connections("the node is draining")
        if self.stomp is not None:
            await self.stomp.close_connections("the node is draining")

    def _hangup(self, signum: int, frame: object) -> None:
        # A signal handler runs between any two bytecodes: the work waits for the reactor.
        self.reactor.callFromThread(self._reload_on_hangup)

    def _reload_on_hangup(self) -> None:
        log.info("node {name}: SIGHUP received, reloading", name=self.config.name)
        Deferred.fromCoroutine(self.reload()).addErrback(
            lambda failure: log.failure("the reload failed", failure)
        )

    async def reload(self) -> None:
        """Read the configuration file again and apply what can change while the node runs:
        the bridges (as ``POST /reload`` does, node file and bridges-dir), the users files
        and the security settings (all or nothing: a bad one keeps the old ones). Logs
        what was reloaded, each error, and the changes that wait for a restart."""
        name = self.config.name
        security, bridges = self.security, self.bridges
        if security is None or bridges is None or self._stopping is not None:
            log.warn("node {name}: not running, nothing reloaded", name=name)
            return
        try:
            new = load_node_config(self.config.source)
        except ConfigError as error:
            log.error("node {name}: nothing reloaded: {error}", name=name, error=error)
            return
        try:
            security.reload(new.security)
        except ConfigError as error:
            log.error(
                "node {name}: users and security settings not reloaded, the old ones stay: {error}",
                name=name,
                error=error,
            )
            reloaded = "bridges"
        else:
            reloaded = "bridges, users and security settings"
        self._bridges_from = new
        for problem in await bridges.reload():
            log.error("node {name}: bridge file not used: {problem}", name=name, problem=problem)
        waiting = [
            field.name.replace("_", "-")
            for field in attrs.fields(NodeConfig)
            if field.init
            and field.name not in RELOADABLE
            and getattr(new, field.name) != getattr(self.config, field.name)
        ]
        log.info(
            "node {name} reloaded {reloaded}{waiting}",
            name=name,
            reloaded=reloaded,
            waiting=f"; changes to {', '.join(waiting)} need a restart" if waiting else "",
        )

    def _failed(self, failure: Failure) -> None:
        """Start-up failed: undo what started, then end the process with status 1."""
        log.critical("node {name} could not start: {why}", name=self.config.name, why=failure.value)
        stopping = self._stop_once()
        if self.exit_on_failure:
            stopping.addBoth(lambda _: self._exit())
        self.started.errback(failure)

    def _activation_failed(self, failure: Failure) -> None:
        """Activating on the lease failed (a port in use): as a failed start, the node
        stops (releasing the lease) and ends with status 1."""
        log.critical(
            "node {name} could not activate: {why}", name=self.config.name, why=failure.value
        )
        stopping = self._stop_once()
        if self.exit_on_failure:
            stopping.addBoth(lambda _: self._exit())

    def _exit(self) -> None:
        # A start that fails at once fails before twistd runs the reactor: stopping it
        # then would be lost, so the stop waits until it runs.
        self.reactor.addSystemEventTrigger("after", "shutdown", _exit_failed)
        self.reactor.callWhenRunning(self.reactor.stop)

    def stopService(self) -> Deferred[None]:
        super().stopService()  # type: ignore[no-untyped-call]
        return self._stop_once()

    def _stop_once(self) -> Deferred[None]:
        """Stop, once however often asked (a failed start stops, then so may its owner):
        every caller's Deferred fires when the one stop is complete."""
        if self._stopping is None:
            self._stopping = Deferred.fromCoroutine(self._stop())
        done: Deferred[None] = Deferred()
        self._stopping.addBoth(_pass_on, done)
        return done

    async def _stop(self) -> None:
        if self._starting is not None and not self._starting.called:
            # Stopping while starting: let the start finish (or fail) first.
            with suppress(Exception):
                await self.started
        if self.ha is not None:
            if self.replication is not None:
                self.replication.stopping = True
            await self.ha.stop()  # deactivates, then releases the lease
            if self.replication is not None:
                await self.replication.activating()  # a backup stops copying
            management = self.ports.pop("management", None)
            if management is not None:
                await _stopped(management)
        else:
            await self._deactivate()
        self.security = None
        if self._unroute_audit is not None:
            unroute, self._unroute_audit = self._unroute_audit, None
            unroute()

    async def _deactivate(self) -> None:
        """Stop serving: the bridges, the ports, every connection (their in-flight sends
        fail back to their producers), then the store."""
        if self.replication is not None:
            # first: closing its link with the connections would clear its backup from
            # the lease, and the sends still in flight would be confirmed without it
            await self.replication.stop_live()
        if self.members is not None:
            members, self.members = self.members, None
            await members.stop()
        if self.bridges is not None:
            bridges, self.bridges = self.bridges, None
            await bridges.stop_all()
        kept = "management" if self.ha is not None else None  # a backup answers too
        ports = {name: port for name, port in self.ports.items() if name != kept}
        self.ports = {name: port for name, port in self.ports.items() if name == kept}
        for port in ports.values():
            await _stopped(port)
        if self.head is not None:
            await self.head.close_connections("the node is shutting down")
            self.head = None
        if self.stomp is not None:
            await self.stomp.close_connections("the node is shutting down")
            self.stomp = None
        if self.broker is not None:
            broker, self.broker = self.broker, None
            await broker.close()
            log.info("node {name} stopped", name=self.config.name)
        ha = self.ha
        if self.replication is not None and ha is not None and ha.state is HaState.FENCED:
            self.replication.as_backup()  # a backup again: copy from the new live node


async def _listening(what: str, listening: Deferred[IListeningPort]) -> IListeningPort:
    try:
        return await listening
    except Exception as error:
        raise StartupError(f"{what}: {error}") from error


def _store(config: NodeConfig, reactor: Any, ha: HaNode | None) -> MessageStore:
    """The store ``[store]`` names: SQLite in its directory, or PostgreSQL; with HA, writing
    under the live lock's fencing token."""
    fenced = ha.fenced if ha is not None else None
    # the token is checked in the store where the lock keeps it: a shared SQLite store's
    token = ha.token if ha is not None and ha.settings.url is None else None
    if config.store.type is StoreType.POSTGRESQL:
        assert config.store.url is not None
        token = ha.token if ha is not None else None
        # imported here: psycopg is about 10 MiB of a node's memory, for the nodes that use it
        from bridge.store.postgresql import PostgreSQLMessageStore  # noqa: PLC0415

        return PostgreSQLMessageStore(
            config.store.url, config.data_dir, reactor, token=token, fenced=fenced
        )
    return SQLiteMessageStore(config.store_dir, reactor, token=token, fenced=fenced)


async def _stopped(port: IListeningPort) -> None:
    stopped: Deferred[None] | None = port.stopListening()
    if stopped is not None:
        await stopped


def _where(port: IListeningPort) -> str:
    host = port.getHost()
    return f"{getattr(host, 'host', '?')}:{getattr(host, 'port', '?')}"


def _pass_on(result: object, to: Deferred[None]) -> object:
    if isinstance(result, Failure):
        to.errback(result)
        return None
    to.callback(None)
    return result


def _exit_failed() -> None:
    """After the reactor stopped on a failed start: leave with status 1 (twistd itself
    would exit 0)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)
