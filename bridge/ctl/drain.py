"""The node service's glue of a graceful drain (:mod:`bridge.ha.drain`, docs/ha.md).

Finding the target: the node logs in to each of its ``[cluster] members`` as the cluster
user and reads the node name it answers with, which is the member's id in the failover
map (as ``txbridge cluster map`` has it); the view is the members that answer, in the
order ``members`` lists them. A member's host id is its own to know: the draining node
has its own (``[cluster] host-id``) and takes every other member as on a host of its own.

Moving: one bridge (``bridge.forward``) per queue that holds messages once the clients'
connections are closed, to the target's URL in ``members``, with duplicate detection, as
a drain's bridge (``Bridge(moving=True)``). The node stops once each bridge's queue is
empty and every message it forwarded is confirmed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from bridge.client.api import NO_RECONNECT, connect
from bridge.client.errors import ClientError
from bridge.config.bridges import BridgeConfig
from bridge.config.cluster import ClusterSettings
from bridge.forward.bridge import Bridge
from bridge.forward.forwarded import Origin
from bridge.forward.manager import client_connector
from bridge.forward.status import BridgeState
from bridge.ha.drain import Drain, DrainProgress, DrainState, IDrainActions
from bridge.ha.failover import PolicyError, checked_map
from bridge.ha.view import ClusterView, Member
from bridge.node.broker import Broker
from transport.urls import URL

log = Logger()

DRAIN_SOURCE = "drain"
"""The source a drain's bridges name (their key is their queue's name)."""


class DrainRefused(Exception):
    """The drain cannot begin, or failed: the message says why."""


@implementer(IDrainActions)
class NodeDrain:
    """One node's drain. ``close`` stops its acceptors and ends its clients' connections;
    ``stop`` stops the node (the process ends with status 0)."""

    def __init__(
        self,
        name: str,
        node_id: str,
        cluster: ClusterSettings | None,
        broker: Broker,
        reactor: Any,
        *,
        close: Callable[[], Deferred[None]],
        stop: Callable[[], None],
    ) -> None:
        self._name = name
        self._node_id = node_id
        self._cluster = cluster
        self._broker = broker
        self._reactor = reactor
        self._close = close
        self._stop = stop
        self._urls: dict[str, URL] = {}
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
        finding = Deferred.fromCoroutine(self._find())
        finding.addCallbacks(self.drain.inputs.mapped, self._not_found)

    def _not_found(self, failure: Failure) -> None:
        if failure.check(DrainRefused, PolicyError):
            self.drain.inputs.failed(str(failure.value))
        else:
            log.failure("node {name}: finding the drain's target failed", failure, name=self._name)
            self.drain.inputs.failed(f"finding the target failed: {failure.value}")

    async def _find(self) -> Mapping[str, tuple[str, ...]]:
        cluster = self._cluster
        if cluster is None:
            raise DrainRefused("the node has no [cluster]: there is no failover node to move to")
        members: list[Member] = []
        for url in cluster.members:
            name = await self._member_name(cluster, url)
            if name is None or name in self._urls:
                continue
            self._urls[name] = url
            host = cluster.own_host_id() if name == self._name else f"{name} (another host)"
            members.append(Member(name, (str(url),), host))
        if self._name not in self._urls:
            raise DrainRefused(
                f"node {self._name} did not answer at any of [cluster] members: it is not "
                "a member, so it has no place in the failover map"
            )
        view = ClusterView(tuple(members))
        failover = checked_map(cluster.failover_policy, view)
        log.info(
            "node {name}: the cluster's view {view}; fails over to {failover}",
            name=self._name,
            view=", ".join(view.node_ids),
            failover=", ".join(failover[self._name]) or "nobody",
        )
        return failover

    async def _member_name(self, cluster: ClusterSettings, url: URL) -> str | None:
        """The node name the member at ``url`` answers with, or None if it does not."""
        try:
            client = await connect(
                self._reactor,
                url,
                user=cluster.user,
                password=cluster.password,
                client_id=f"drain of node {self._name}",
                reconnect=NO_RECONNECT,
            )
        except ClientError as error:
            log.info(
                "node {name}: member {url} left out: {error}", name=self._name, url=url, error=error
            )
            return None
        name = client.node_name
        await client.close()
        return name

    def close(self) -> None:
        log.info(
            "node {name}: draining to {target}: acceptors and client connections closing",
            name=self._name,
            target=self.drain.progress().target,
        )
        closing = self._close()
        closing.addCallbacks(self._closed, self._close_failed)

    def _closed(self, _: None) -> None:
        depths = {name: queue.depth for name, queue in self._broker.queues.items()}
        self.drain.inputs.closed(depths)

    def _close_failed(self, failure: Failure) -> None:
        log.failure("node {name}: closing for the drain failed", failure, name=self._name)
        self.drain.inputs.failed(f"closing the acceptors and connections failed: {failure.value}")

    def move(self, target: str, queues: tuple[str, ...]) -> None:
        cluster = self._cluster
        assert cluster is not None
        url = self._urls[target]
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
