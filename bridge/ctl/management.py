"""The node's management API over HTTP: ``GET /status`` (JSON), ``GET /metrics``
(Prometheus text), and with bridges ``POST /bridges/NAME/ACTION`` and ``POST /reload``.

The reads read the broker and the bridges when asked, on the reactor thread: the hot path
of a message pays nothing for them beyond the queues' own counters. With security on, every
request carries HTTP Basic credentials, checked by the node's one :class:`SecurityStore`
(the password hash off the reactor thread) and then for the ``manage`` permission on the
address ``txbridge.management``. docs/management.md is the reference.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator
from urllib.parse import unquote

import attrs
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.threads import deferToThread
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from bridge.ctl.drain import DrainRefused, NodeDrain
from bridge.ctl.status import (
    AddressStatus,
    BridgeStatus,
    DrainQueueStatus,
    DrainStatus,
    HaStatus,
    NodeStatus,
    QueueStatus,
    Status,
)
from bridge.forward.interfaces import IBridges, UnknownBridge
from bridge.forward.status import BridgeSnapshot, BridgeState
from bridge.ha.drain import DrainProgress, DrainState
from bridge.logins import Logins
from bridge.node.broker import Broker
from security import (
    AuthenticationFailed,
    Permission,
    PermissionDenied,
    SecurityAuth,
    SecurityStore,
)

MANAGEMENT_ADDRESS = "txbridge.management"
"""The address a user needs ``manage`` on to use the management API."""

PROTOCOL = "management"
"""The protocol name logins through this API carry (the security audit log shows it)."""

REALM = b'Basic realm="txbridge", charset="UTF-8"'

BRIDGE_ACTIONS = ("pause", "resume", "stop", "start")
"""What ``POST /bridges/NAME/ACTION`` does, each the :class:`IBridges` method of its name."""

log = Logger()


@attrs.frozen
class Serving:
    """What a serving node has: its broker, its connection counts and its bridges."""

    broker: Broker
    connections: Callable[[], int] = lambda: 0
    producers_blocked: Callable[[], int] = lambda: 0
    bridges: IBridges | None = None
    drain: NodeDrain | None = None
    """The node's drain (``POST /node/drain``); None where a node cannot drain."""


@attrs.frozen
class NodeView:
    """What both endpoints read, at request time: the node's own facts, and what it
    serves (None: a node with ``[ha]`` that waits for the lease serves nothing)."""

    name: str
    node_id: str
    clock: IReactorTime
    started: float
    serving: Callable[[], Serving | None]
    ha: Callable[[], HaStatus | None] = lambda: None
    """With ``[ha]``: the node's HA status now."""
    failover: Callable[[], bool] | None = None
    """With ``[ha]``: start a soft failover (False: the node is not LIVE)."""

    def uptime(self) -> float:
        return self.clock.seconds() - self.started

    def bridges(self) -> IBridges | None:
        serving = self.serving()
        return serving.bridges if serving is not None else None

    def bridge_snapshots(self) -> list[BridgeSnapshot]:
        """Every bridge now, by name (none without bridges)."""
        bridges = self.bridges()
        if bridges is None:
            return []
        return sorted(bridges.snapshots(), key=lambda snapshot: snapshot.name)

    def status(self) -> Status:
        """The node now."""
        serving = self.serving()
        if serving is None:
            node = NodeStatus(self.name, self.node_id, round(self.uptime(), 3), 0)
            return Status(node, (), (), 0, 0, 0, 0, ha=self.ha())
        broker = serving.broker
        queues = broker.queues
        return Status(
            node=NodeStatus(
                name=self.name,
                id=self.node_id,
                uptime_seconds=round(self.uptime(), 3),
                connections=serving.connections(),
            ),
            addresses=tuple(
                AddressStatus(
                    name=name,
                    routing=",".join(sorted(r.value for r in address.routing_types)),
                    queues=tuple(sorted(b.queue.name for b in address.bindings)),
                    memory_bytes=address.memory.size,
                    max_size_bytes=address.memory.max_size,
                    address_full_policy=address.memory.policy.value,
                    full=address.memory.full,
                    paged_messages=address.memory.paged_messages,
                    paged_bytes=address.memory.paged_bytes,
                    messages_paged=address.memory.paged_total,
                    messages_dropped=address.memory.dropped_total,
                    sends_refused=address.memory.refused_total,
                )
                for name, address in sorted(broker.addresses.items())
            ),
            queues=tuple(
                QueueStatus(
                    name=name,
                    address=queue.address,
                    durable=broker.is_durable(name),
                    depth=queue.depth,
                    waiting=queue.waiting,
                    in_flight=queue.in_flight,
                    consumers=len(queue.consumer_ids),
                    messages_added=queue.added_total,
                    messages_acknowledged=queue.acknowledged_total,
                    messages_dropped=queue.dropped_total,
                )
                for name, queue in sorted(queues.items())
            ),
            memory_bytes=broker.memory.size,
            global_max_size=broker.memory.max_size,
            paged_bytes=sum(a.memory.paged_bytes for a in broker.addresses.values()),
            producers_blocked=serving.producers_blocked(),
            bridges=tuple(
                BridgeStatus(
                    **attrs.asdict(snapshot, recurse=False) | {"state": snapshot.state.value}
                )
                for snapshot in self.bridge_snapshots()
            ),
            ha=self.ha(),
            drain=None if serving.drain is None else drain_status(serving.drain.progress()),
        )


def drain_status(progress: DrainProgress) -> DrainStatus | None:
    """The drain as ``/status`` shows it; None while the node serves."""
    if progress.state is DrainState.SERVING:
        return None
    return DrainStatus(
        state=progress.state.value,
        target=progress.target,
        reason=progress.reason,
        messages_at_start=progress.at_start,
        messages_left=progress.left,
        queues=tuple(
            DrainQueueStatus(queue.name, queue.at_start, queue.left) for queue in progress.queues
        ),
    )


class BrokerCollector(Collector):
    """Prometheus metrics read from the broker at scrape time (docs/management.md)."""

    def __init__(self, view: NodeView) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        view = self._view
        yield InfoMetricFamily(
            "txbridge_node",
            "The node's name and id.",
            value={"name": view.name, "id": view.node_id},
        )
        yield GaugeMetricFamily(
            "txbridge_node_uptime_seconds", "Seconds since the node started.", view.uptime()
        )
        ha = view.ha()
        if ha is not None:
            yield from _ha_metrics(ha)
        serving = view.serving()
        if serving is None:
            return  # a backup: nothing served
        broker = serving.broker
        yield GaugeMetricFamily(
            "txbridge_connections", "Client connections open now.", serving.connections()
        )
        addresses = broker.addresses
        yield GaugeMetricFamily(
            "txbridge_memory_bytes",
            "Bytes of messages the node holds in memory.",
            broker.memory.size,
        )
        yield GaugeMetricFamily(
            "txbridge_paged_bytes",
            "Bytes of messages paged to the store, not yet read back.",
            sum(a.memory.paged_bytes for a in addresses.values()),
        )
        yield GaugeMetricFamily(
            "txbridge_producers_blocked",
            "Producers waiting for credits from an address full under BLOCK.",
            serving.producers_blocked(),
        )
        yield from _address_metrics(broker)
        labels = ["queue", "address"]
        gauges = {
            "depth": GaugeMetricFamily(
                "txbridge_queue_depth", "Messages in the queue, in flight included.", labels=labels
            ),
            "in_flight": GaugeMetricFamily(
                "txbridge_queue_in_flight",
                "Messages delivered and not yet acknowledged.",
                labels=labels,
            ),
            "consumers": GaugeMetricFamily(
                "txbridge_queue_consumers", "Consumers of the queue.", labels=labels
            ),
        }
        counters = {
            "added": CounterMetricFamily(
                "txbridge_queue_messages_added",
                "Messages added since the node started (recovered ones included).",
                labels=labels,
            ),
            "acknowledged": CounterMetricFamily(
                "txbridge_queue_messages_acknowledged", "Messages acknowledged.", labels=labels
            ),
            "dropped": CounterMetricFamily(
                "txbridge_queue_messages_dropped",
                "Messages refused by a consumer without requeue.",
                labels=labels,
            ),
        }
        for name, queue in sorted(broker.queues.items()):
            values = [name, queue.address]
            gauges["depth"].add_metric(values, queue.depth)
            gauges["in_flight"].add_metric(values, queue.in_flight)
            gauges["consumers"].add_metric(values, len(queue.consumer_ids))
            counters["added"].add_metric(values, queue.added_total)
            counters["acknowledged"].add_metric(values, queue.acknowledged_total)
            counters["dropped"].add_metric(values, queue.dropped_total)
        yield from gauges.values()
        yield from counters.values()
        yield from _bridge_metrics(view.bridge_snapshots())


def _ha_metrics(ha: HaStatus) -> Iterator[Metric]:
    yield InfoMetricFamily(
        "txbridge_ha",
        "The node's HA part and state.",
        value={"state": ha.state, "policy": ha.policy, "live": ha.live},
    )
    yield GaugeMetricFamily("txbridge_ha_epoch", "The lease's epoch.", ha.epoch)
    yield GaugeMetricFamily(
        "txbridge_ha_lease_left_seconds",
        "How long the lease had to run when last read, by the database's clock.",
        ha.lease_left_ms / 1000,
    )
    yield GaugeMetricFamily(
        "txbridge_ha_backups", "Nodes waiting for the lease, as last seen.", len(ha.backups)
    )
    yield GaugeMetricFamily(
        "txbridge_ha_clock_skew_seconds",
        "The node's clock minus the database's.",
        ha.clock_skew_ms / 1000,
    )
    vote = ha.last_vote
    if vote is not None:
        yield GaugeMetricFamily(
            "txbridge_ha_quorum_last_vote_won",
            "1 if the last quorum vote this node asked was won (a pair without a lease).",
            1 if vote.won else 0,
        )
        yield GaugeMetricFamily(
            "txbridge_ha_quorum_last_vote_grants",
            "Voters that granted the last quorum vote this node asked.",
            vote.grants,
        )
    copy = ha.replication
    if copy is not None:
        yield InfoMetricFamily(
            "txbridge_ha_replication",
            "This node's side of the store's copy.",
            value={"role": copy.role, "state": copy.state, "peer": copy.peer},
        )
        yield GaugeMetricFamily(
            "txbridge_ha_replication_in_sync",
            "1 while the copy is in sync (live: the lease names the backup).",
            1 if copy.state == "in-sync" else 0,
        )
        yield GaugeMetricFamily(
            "txbridge_ha_replication_lag_batches",
            "Live node: batches its backup has not acknowledged.",
            copy.lag_batches,
        )
        yield GaugeMetricFamily(
            "txbridge_ha_replication_sync_bytes",
            "Live node: bytes of the current or last copy sent.",
            copy.sync_bytes,
        )


_Figures = list[tuple[str, str, str]]
"""Metrics read from an attribute: the name after the prefix, the help, the attribute."""


def _labelled(
    prefix: str,
    label: str,
    gauges: _Figures,
    counters: _Figures,
    items: Iterable[tuple[str, object]],
) -> Iterator[Metric]:
    """A gauge or counter family per figure, a sample per item (its label value and the
    object whose attributes the figures read)."""
    families: list[tuple[GaugeMetricFamily | CounterMetricFamily, str]] = [
        (GaugeMetricFamily(f"{prefix}_{name}", text, labels=[label]), attribute)
        for name, text, attribute in gauges
    ]
    families += [
        (CounterMetricFamily(f"{prefix}_{name}", text, labels=[label]), attribute)
        for name, text, attribute in counters
    ]
    for value, item in items:
        for family, attribute in families:
            family.add_metric([value], getattr(item, attribute))
    for family, _ in families:
        yield family


def _address_metrics(broker: Broker) -> Iterator[Metric]:
    """Each address's memory and what its address-full policy did."""
    gauges = [
        ("memory_bytes", "Bytes of the address's messages in memory.", "size"),
        ("paged_messages", "Messages paged to the store, not yet read back.", "paged_messages"),
        ("paged_bytes", "Bytes of those paged messages.", "paged_bytes"),
    ]
    counters = [
        ("messages_paged", "Messages paged since the node started.", "paged_total"),
        ("messages_dropped", "Messages dropped by the DROP policy.", "dropped_total"),
        ("sends_refused", "Sends refused by the FAIL policy.", "refused_total"),
    ]
    addresses = sorted(broker.addresses.items())
    yield from _labelled(
        "txbridge_address",
        "address",
        gauges,
        counters,
        ((name, address.memory) for name, address in addresses),
    )
    full = GaugeMetricFamily(
        "txbridge_address_full", "1 while the address is full, else 0.", labels=["address"]
    )
    for name, address in addresses:
        full.add_metric([name], int(address.memory.full))
    yield full


def _bridge_metrics(snapshots: list[BridgeSnapshot]) -> Iterator[Metric]:
    """Each bridge's counters, its state and whether it is up."""
    gauges = [
        (
            "pending_confirmations",
            "Messages sent to the target and not yet confirmed.",
            "pending_confirmations",
        ),
    ]
    counters = [
        ("messages_forwarded", "Messages the target confirmed.", "messages_forwarded"),
        ("bytes_forwarded", "Bytes of those messages.", "bytes_forwarded"),
        (
            "messages_skipped",
            "Messages not forwarded: seen by the target node before, or dropped by the "
            "transformer.",
            "messages_skipped",
        ),
        (
            "paused_writability_seconds",
            "Seconds not taking messages: the target connection not writable or the "
            "confirmation window full.",
            "paused_writability_seconds",
        ),
        (
            "paused_credits_seconds",
            "Seconds not taking messages for want of the target's producer credits.",
            "paused_credits_seconds",
        ),
        ("reconnects", "Connections to a target made again after one was lost.", "reconnects"),
    ]
    yield from _labelled(
        "txbridge_bridge",
        "bridge",
        gauges,
        counters,
        ((snapshot.name, snapshot) for snapshot in snapshots),
    )
    state = GaugeMetricFamily(
        "txbridge_bridge_state",
        "1 for the bridge's state now, 0 for the others.",
        labels=["bridge", "state"],
    )
    up = GaugeMetricFamily(
        "txbridge_bridge_up", "1 while the bridge is STARTED, else 0.", labels=["bridge"]
    )
    for snapshot in snapshots:
        for each in BridgeState:
            state.add_metric([snapshot.name, each.value], int(snapshot.state is each))
        up.add_metric([snapshot.name], int(snapshot.state is BridgeState.STARTED))
    yield state
    yield up


@attrs.frozen
class Answer:
    """A response: status code, content type and body."""

    code: int
    content_type: bytes
    body: bytes

    @classmethod
    def error(cls, code: int, message: str) -> Answer:
        body = json.dumps({"error": message, "status": code}).encode()
        return cls(code, b"application/json", body)


class Refused(Exception):
    """A request the API turns away (401 or 403), with the answer to give."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer)
        self.answer = answer


def _credentials(request: Request) -> tuple[str, str] | None:
    """The user and password of an HTTP Basic ``Authorization`` header; None without one
    (or with one that is not well formed)."""
    header = request.getHeader(b"authorization")
    if header is None:
        return None
    scheme, _, encoded = header.partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon else None


def _remote(request: Request) -> str:
    address = request.getClientAddress()
    if isinstance(address, IPv6Address):
        return f"[{address.host}]:{address.port}"
    if isinstance(address, IPv4Address):
        return f"{address.host}:{address.port}"
    return str(address)


Endpoint = Callable[[], Awaitable[Answer]]


def _json(document: object) -> Answer:
    return Answer(200, b"application/json", json.dumps(document).encode())


def _at_once(read: Callable[[], Answer]) -> Endpoint:
    async def answer() -> Answer:
        return read()

    return answer


async def _operate(operation: Callable[[str], Deferred[None]], action: str, name: str) -> Answer:
    """Pause, resume, stop or start a bridge; the answer when that is done (or failed)."""
    try:
        await maybeDeferred(operation, name)
    except UnknownBridge:
        return Answer.error(404, f"no bridge {name!r}")
    except Exception as error:
        return Answer.error(409, f"cannot {action} bridge {name!r}: {error}")
    return _json({"ok": True})


async def _reload(bridges: IBridges) -> Answer:
    """Read the bridge files again; the answer lists the errors of those that are bad."""
    try:
        errors = await maybeDeferred(bridges.reload)
    except Exception as error:
        log.failure("reloading the bridge files failed")
        return Answer.error(500, f"reload failed: {error}")
    return _json({"ok": not errors, "errors": errors})


async def _drain(drain: NodeDrain) -> Answer:
    """Drain the node: the answer once it is drained (the node then stops), or why not."""
    try:
        progress = await drain.start()
    except DrainRefused as refused:
        return Answer.error(409, f"cannot drain: {refused}")
    status = drain_status(progress)
    assert status is not None
    return _json(attrs.asdict(status, value_serializer=_lists))


def _lists(_: object, __: object, value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def _failover(failover: Callable[[], bool]) -> Answer:
    if not failover():
        return Answer.error(409, "this node is not LIVE: there is nothing to hand over")
    return _json({"ok": True})


class ManagementResource(Resource):
    """``/status`` and ``/metrics`` (GET or HEAD), and with bridges ``/reload`` and
    ``/bridges/NAME/ACTION`` (POST), behind the security store."""

    isLeaf = True

    def __init__(
        self, view: NodeView, security: SecurityStore, logins: Logins | None = None
    ) -> None:
        Resource.__init__(self)
        self._security = security
        self._logins = logins
        self._view = view
        self._failover = view.failover
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(view))
        self._reads: dict[bytes, Callable[[], Answer]] = {
            b"/status": lambda: Answer(
                200, b"application/json", json.dumps(view.status().to_json()).encode()
            ),
            b"/metrics": lambda: Answer(
                200, CONTENT_TYPE_LATEST.encode(), generate_latest(registry)
            ),
        }

    def _action(self, path: bytes) -> Endpoint | None:
        """The POST endpoint at ``path``, if there is one."""
        failover = self._failover
        if path == b"/ha/failover" and failover is not None:
            return _at_once(lambda: _failover(failover))
        serving = self._view.serving()
        drain = None if serving is None else serving.drain
        if path == b"/node/drain" and drain is not None:
            return lambda: _drain(drain)
        bridges = self._view.bridges()
        if bridges is None:
            return None
        if path == b"/reload":
            return lambda: _reload(bridges)
        parts = path.decode("utf-8", "replace").split("/")
        if len(parts) != 4 or parts[:2] != ["", "bridges"] or not parts[2]:
            return None
        operations = {
            "pause": bridges.pause,
            "resume": bridges.resume,
            "stop": bridges.stop,
            "start": bridges.start,
        }
        action, name = parts[3], unquote(parts[2])
        operation = operations.get(action)
        return None if operation is None else lambda: _operate(operation, action, name)

    def _known(self) -> str:
        known = [path.decode() for path in self._reads]
        if self._failover is not None:
            known.append("/ha/failover")
        serving = self._view.serving()
        if serving is not None and serving.drain is not None:
            known.append("/node/drain")
        if self._view.bridges() is not None:
            known += ["/reload", "/bridges/NAME/" + "|".join(BRIDGE_ACTIONS)]
        return ", ".join(known)

    def render(self, request: Request) -> bytes | int:
        path = request.path
        read = self._reads.get(path)
        action = self._action(path)
        if read is not None:
            if request.method not in (b"GET", b"HEAD"):
                return _not_allowed(request, b"GET, HEAD")
            if not self._security.enabled:
                return _send(request, read())
            endpoint = _at_once(read)
        elif action is not None:
            if request.method != b"POST":
                return _not_allowed(request, b"POST")
            endpoint = action
        else:
            shown = path.decode("utf-8", "replace")
            known = self._known()
            return _send(request, Answer.error(404, f"no resource {shown!r} (there are {known})"))
        Deferred.fromCoroutine(self._answer_when_allowed(request, endpoint))
        return NOT_DONE_YET

    async def _answer_when_allowed(self, request: Request, endpoint: Endpoint) -> None:
        lost = False

        def connection_lost(_: object) -> None:
            nonlocal lost
            lost = True

        request.notifyFinish().addErrback(connection_lost)
        try:
            if self._security.enabled:
                await self._authorize(request)
            answer = await endpoint()
        except Refused as refused:
            answer = refused.answer
        except Exception:
            log.failure("management request {path!r} failed", path=request.path)
            answer = Answer.error(500, "internal error (the node's log has the details)")
        if not lost:
            request.write(_send(request, answer))
            request.finish()

    async def _authorize(self, request: Request) -> None:
        """Return if the request's user may manage the node; Refused otherwise."""
        credentials = _credentials(request)
        if credentials is None:
            request.setHeader(b"www-authenticate", REALM)
            raise Refused(Answer.error(401, "credentials required (HTTP Basic)"))
        user, password = credentials
        auth = SecurityAuth(
            user=user, password=password, remote_address=_remote(request), protocol=PROTOCOL
        )
        try:
            subject = await (
                self._logins.authenticate(auth)
                if self._logins is not None
                else deferToThread(self._security.authenticate, auth)
            )
        except AuthenticationFailed as failed:
            request.setHeader(b"www-authenticate", REALM)
            raise Refused(Answer.error(401, str(failed))) from None
        try:
            self._security.check(subject, MANAGEMENT_ADDRESS, Permission.MANAGE)
        except PermissionDenied as denied:
            raise Refused(Answer.error(403, str(denied))) from None


def _not_allowed(request: Request, allow: bytes) -> bytes:
    """405, naming the methods the path takes."""
    request.setHeader(b"allow", allow)
    method = request.method.decode("ascii", "replace")
    use = allow.split(b",")[0].decode()
    return _send(request, Answer.error(405, f"method {method} not allowed: use {use}"))


def _send(request: Request, answer: Answer) -> bytes:
    """Set the answer's code and headers on ``request``; the body to write."""
    request.setResponseCode(answer.code)
    request.setHeader(b"content-type", answer.content_type)
    request.setHeader(b"cache-control", b"no-store")
    return answer.body


def management_site(
    broker: Broker,
    security: SecurityStore,
    *,
    node_id: str,
    reactor: IReactorTime,
    connections: Callable[[], int] = lambda: 0,
    producers_blocked: Callable[[], int] = lambda: 0,
    bridges: IBridges | None = None,
    logins: Logins | None = None,
    drain: NodeDrain | None = None,
) -> Site:
    """The management API of a node, for the node service to listen with.

    ``reactor`` is the clock of the uptime (counted from this call); ``connections``
    says how many client connections the node has open now, ``producers_blocked`` how
    many producers wait for credits; ``bridges``, the node's bridges, to show and operate
    (without them, ``/status`` shows none and there are no POST endpoints); ``logins``,
    the node's bounded logins (without them, each login hashes in the reactor's pool);
    ``drain``, the node's drain (without it, no ``POST /node/drain``)."""
    serving = Serving(broker, connections, producers_blocked, bridges, drain)
    view = NodeView(broker.config.name, node_id, reactor, reactor.seconds(), lambda: serving)
    return view_site(view, security, logins)


def view_site(view: NodeView, security: SecurityStore, logins: Logins | None = None) -> Site:
    """The management API over ``view`` (a node with ``[ha]`` opens it at start, before
    it serves anything, so that a backup answers too)."""
    site = Site(ManagementResource(view, security, logins))
    site.displayTracebacks = False
    return site
