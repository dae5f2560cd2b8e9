"""The node service's glue of a graceful drain (:mod:`bridge.ha.drain`, docs/ha.md).

Finding the target: the members' view (:class:`bridge.ctl.members.ClusterMembers`: the
members this node has a link with, with their own host ids) and the failover map of that
view; the target is the first node of this node's list. While the view holds no such node
(the links are still coming up), the drain waits for the view to change, at most
``[cluster] drain-target-timeout``, and fails if none comes.

Moving: before closing, the node's TOPOLOGY says it serves nothing, so its core clients go
to its failover nodes as soon as their connections close. Then one bridge
(``bridge.forward``) per queue that holds messages once the connections are closed, to the
target's URL, with duplicate detection, as a drain's bridge (``Bridge(moving=True)``). The
node stops once each bridge's queue is empty and every message it forwarded is confirmed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.defer import CancelledError, Deferred, DeferredList, TimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from bridge.config.bridges import BridgeConfig
from bridge.config.cluster import ClusterSettings
from bridge.forward.bridge import Bridge
from bridge.forward.forwarded import Origin
from bridge.forward.manager import client_connector
from bridge.forward.status import BridgeState
from bridge.ha.drain import Drain, DrainProgress, DrainState, IDrainActions, first_failover
from bridge.ha.failover import FailoverMap
from bridge.ha.topology import Topology
from bridge.ha.view import Member
from bridge.node.broker import Broker
from transport.urls import URL, parse_url

log = Logger()

DRAIN_SOURCE = "drain"
"""The source a drain's bridges name (their key is their queue's name)."""


class DrainRefused(Exception):
    """The drain cannot begin, or failed: the message says why."""


class MembersView(Protocol):
    """What the drain reads of the members' view (:class:`ClusterMembers`)."""

    @property
    def topology_now(self) -> Topology: ...

    def when_changed(self) -> Deferred[None]: ...

    def serve_nothing(self) -> None: ...


def failover_map(topology: Topology) -> FailoverMap:
    """The failover map of the view ``topology`` holds."""
    return {entry.member.node_id: entry.failover for entry in topology.entries}


def wait_for_target(
    members: MembersView, node: str, timeout: float, clock: IReactorTime
) -> Deferred[FailoverMap]:
    """The view's map once it gives ``node`` a failover node: at once if it does now,
    else at the first change of the view that does; fails with DrainRefused after
    ``timeout`` seconds without one (or if the view stops being kept)."""

    async def waiting() -> FailoverMap:
        while first_failover(node, failover_map(members.topology_now)) is None:
            await members.when_changed()
        return failover_map(members.topology_now)

    def refused(failure: Failure) -> Failure:
        if failure.check(TimeoutError):
            known = ", ".join(members.topology_now.view.node_ids)
            raise DrainRefused(
                f"node {node} has no failover node in the cluster's view ({known}) after "
                f"{timeout:g}s ([cluster] drain-target-timeout): no member to drain to"
            )
        if failure.check(CancelledError):
            raise DrainRefused("the node stopped keeping its cluster view")
        return failure

    found = Deferred.fromCoroutine(waiting())
    found.addTimeout(timeout, clock)
    return found.addErrback(refused)


@implementer(IDrainActions)
class NodeDrain:
    """One node's drain over its members' view (None: the node has no ``[cluster]``).
    ``close`` stops its acceptors and ends its clients' connections; ``stop`` stops the
    node (the process ends with status 0)."""

    def __init__(
        self,
        name: str,
        node_id: str,
        cluster: ClusterSettings | None,
        broker: Broker,
        reactor: Any,
        *,
        members: MembersView | None,
        close: Callable[[], Deferred[None]],
        stop: Callable[[], None],
    ) -> None:
        self._name = name
        self._node_id = node_id
        self._cluster = cluster
        self._members = members
        self._broker = broker
        self._reactor = reactor
        self._close = close
        self._stop = stop
        self._bridges: list[Bridge] = []
        self._waiters: list[Deferred[DrainProgress]] = []
        self.drain = Drain(name, self, self._depth, self._failed)

    def _depth(self, queue: str) -> int:
        found = self._broker.queues.get(queue)
        return 0 if found is None else found.depth

    def progress(self) -> DrainProgress:
        return self.drain.progress()

    def start(self) -> Deferred[DrainProgress]:
        """Drain (or join the drain under way): fires with the progress once DRAINED, just
        before the node stops; fails with DrainRefused if the drain failed."""
        waiter: Deferred[DrainProgress] = Deferred()
        self._waiters.append(waiter)
        if self.drain.state in (DrainState.SERVING, DrainState.FAILED):
            log.info("node {name}: drain asked", name=self._name)
            self.drain.inputs.start()
        return waiter

    def _failed(self, reason: str) -> None:
        log.error("node {name}: the drain failed: {reason}", name=self._name, reason=reason)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.errback(DrainRefused(reason))

    # -- IDrainActions ------------------------------------------------------------------

    def find_target(self) -> None:
        cluster, members = self._cluster, self._members
        if cluster is None or members is None:
            self.drain.inputs.failed(
                "the node has no [cluster]: there is no failover node to move to"
            )
            return
        if first_failover(self._name, failover_map(members.topology_now)) is None:
            log.info(
                "node {name}: waiting (at most {timeout}s) for a member to drain to",
                name=self._name,
                timeout=cluster.drain_target_timeout,
            )
        finding = wait_for_target(members, self._name, cluster.drain_target_timeout, self._reactor)
        finding.addCallbacks(self._found, self._not_found)

    def _found(self, failover: FailoverMap) -> None:
        log.info(
            "node {name}: the cluster's view {view}; fails over to {failover}",
            name=self._name,
            view=", ".join(failover),
            failover=", ".join(failover[self._name]),
        )
        self.drain.inputs.mapped(failover)

    def _not_found(self, failure: Failure) -> None:
        if failure.check(DrainRefused):
            self.drain.inputs.failed(str(failure.value))
        else:
            log.failure("node {name}: finding the drain's target failed", failure, name=self._name)
            self.drain.inputs.failed(f"finding the target failed: {failure.value}")

    def _url_of(self, member: Member) -> URL:
        """Where the bridges reach ``member``: the ``[cluster] members`` URL naming the
        address it gives (with that entry's TLS settings), else the address as given."""
        cluster = self._cluster
        assert cluster is not None and member.urls
        given = parse_url(member.urls[0])
        for url in cluster.members:
            if (url.scheme, url.host, url.port) == (given.scheme, given.host, given.port):
                return url
        return given

    def close(self) -> None:
        log.info(
            "node {name}: draining to {target}: acceptors and client connections closing",
            name=self._name,
            target=self.drain.progress().target,
        )
        assert self._members is not None
        self._members.serve_nothing()
        closing = self._close()
        closing.addCallbacks(self._closed, self._close_failed)

    def _closed(self, _: None) -> None:
        depths = {name: queue.depth for name, queue in self._broker.queues.items()}
        self.drain.inputs.closed(depths)

    def _close_failed(self, failure: Failure) -> None:
        log.failure("node {name}: closing for the drain failed", failure, name=self._name)
        self.drain.inputs.failed(f"closing the acceptors and connections failed: {failure.value}")

    def move(self, target: str, queues: tuple[str, ...]) -> None:
        cluster, members = self._cluster, self._members
        assert cluster is not None and members is not None
        member = members.topology_now.member(target)
        if member is None or not member.urls:
            self.drain.inputs.failed(f"node {target} left the cluster's view before the move")
            return
        url = self._url_of(member)
        origin = Origin(self._node_id, uuid.uuid4().hex[:12])
        connector = client_connector(self._reactor, self._name)
        log.info(
            "node {name}: moving {count} queue(s) to {target} at {url}",
            name=self._name,
            count=len(queues),
            target=target,
            url=url,
        )
        for queue in queues:
            config = BridgeConfig(
                name=f"drain {queue}",
                queue=queue,
                targets=(url,),
                source=DRAIN_SOURCE,
                key=queue,
                user=cluster.user,
                password=cluster.password,
            )
            bridge = Bridge(config, self._broker, origin, self._reactor, connector, moving=True)
            self._bridges.append(bridge)
            bridge.start().addErrback(self._bridge_failed, bridge)
            bridge.when_empty().addCallback(self._emptied, queue)

    def _emptied(self, _: None, queue: str) -> None:
        self.drain.inputs.emptied(queue)

    def _bridge_failed(self, failure: Failure, bridge: Bridge) -> None:
        if bridge.state is BridgeState.FAILED:
            self.drain.inputs.failed(
                f"the bridge of queue {bridge.config.queue!r}: {bridge.last_error}"
            )

    def stop(self) -> None:
        progress = self.drain.progress()
        log.info(
            "node {name}: drained to {target} ({count} message(s) from {queues} queue(s)); "
            "stopping",
            name=self._name,
            target=progress.target,
            count=progress.at_start,
            queues=len(progress.queues),
        )
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(progress)
        bridges, self._bridges = self._bridges, []
        stopping = DeferredList([bridge.stop() for bridge in bridges], consumeErrors=True)
        stopping.addCallback(lambda _: self._reactor.callLater(0, self._stop))
