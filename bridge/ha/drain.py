"""A node's graceful drain as an automat machine, sans-IO: inputs are what happened (the
target was found, the node stopped accepting, a queue emptied), outputs are calls on
:class:`IDrainActions`, which the node's glue (``bridge.ctl.drain``) performs and answers
with further inputs. Nothing here waits or sleeps.

SERVING → DRAINING (finding the first node of this node's failover list; then closing the
acceptors and the clients' connections; then moving every queue that holds messages to
that node over a bridge) → DRAINED once every such queue is empty and the target confirmed
all it was sent; the node then stops. A drain that finds no target changes nothing (the
node serves on, FAILED says why); one that fails later leaves the node accepting nothing,
with what is left in its store. Artemis calls the same "scale down" (docs/ha.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Protocol

import attrs
from automat import TypeMachineBuilder
from zope.interface import Interface

from bridge.ha.failover import FailoverMap


class DrainState(StrEnum):
    SERVING = "SERVING"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"
    FAILED = "FAILED"


class IDrainActions(Interface):
    """What the node's glue does for the drain."""

    def find_target() -> None:
        """Learn the cluster view; answer ``mapped(view's map)`` or ``failed(reason)``."""

    def close() -> None:
        """Close the acceptors to new connections and end the clients' connections (their
        deliveries not acknowledged return to their queues); answer ``closed(depths)``
        with every queue's depth then."""

    def move(target: str, queues: tuple[str, ...]) -> None:
        """Forward each of ``queues`` to node ``target`` over a bridge with duplicate
        detection; answer ``emptied(queue)`` as each is empty and confirmed, or
        ``failed(reason)``."""

    def stop() -> None:
        """The node is empty: stop it."""


def first_failover(node: str, failover: FailoverMap) -> str | None:
    """The first node of ``node``'s failover list, or None (no list, or an empty one)."""
    found = failover.get(node, ())
    return found[0] if found else None


@attrs.frozen
class QueueProgress:
    """One queue the drain moves: its depth when moving began, and now."""

    name: str
    at_start: int
    left: int


@attrs.frozen
class DrainProgress:
    """What the status shows of a drain."""

    state: DrainState
    target: str
    """The node the queues move to ("" until found)."""
    reason: str
    """Why it failed ("" otherwise)."""
    queues: tuple[QueueProgress, ...]
    """The queues being moved, by name; an emptied one shows 0 left."""

    @property
    def left(self) -> int:
        return sum(queue.left for queue in self.queues)

    @property
    def at_start(self) -> int:
        return sum(queue.at_start for queue in self.queues)


class _Inputs(Protocol):
    def start(self) -> None: ...
    def mapped(self, failover: FailoverMap) -> None: ...
    def closed(self, depths: Mapping[str, int]) -> None: ...
    def emptied(self, queue: str) -> None: ...
    def failed(self, reason: str) -> None: ...


class _Core:
    """The drain's data: the node, the actions, the queues still being moved."""

    def __init__(self, node: str, actions: IDrainActions, on_failed: Callable[[str], None]) -> None:
        self.node = node
        self.actions = actions
        self.on_failed = on_failed
        self.state = DrainState.SERVING
        self.target = ""
        self.reason = ""
        self.at_start: dict[str, int] = {}
        self.moving: set[str] = set()


_builder = TypeMachineBuilder(_Inputs, _Core)
_serving = _builder.state("serving")
_finding = _builder.state("finding")
_closing = _builder.state("closing")
_moving = _builder.state("moving")
_drained = _builder.state("drained")
_failed = _builder.state("failed")


@_serving.upon(_Inputs.start).to(_finding)
@_failed.upon(_Inputs.start).to(_finding)
def _start(inputs: _Inputs, core: _Core) -> None:
    core.state, core.reason, core.target = DrainState.DRAINING, "", ""
    core.actions.find_target()


@_finding.upon(_Inputs.mapped).to(_closing)
def _mapped(inputs: _Inputs, core: _Core, failover: FailoverMap) -> None:
    target = first_failover(core.node, failover)
    if target is None:
        inputs.failed(f"node {core.node} has no failover node in the cluster's map")
        return
    core.target = target
    core.actions.close()


@_closing.upon(_Inputs.closed).to(_moving)
def _closed(inputs: _Inputs, core: _Core, depths: Mapping[str, int]) -> None:
    core.at_start = {name: depth for name, depth in sorted(depths.items()) if depth > 0}
    core.moving = set(core.at_start)
    if not core.moving:
        inputs.emptied("")
        return
    core.actions.move(core.target, tuple(core.at_start))


@_moving.upon(_Inputs.emptied).loop()
def _emptied(inputs: _Inputs, core: _Core, queue: str) -> None:
    core.moving.discard(queue)
    if not core.moving and core.state is DrainState.DRAINING:
        core.state = DrainState.DRAINED
        core.actions.stop()


@_finding.upon(_Inputs.failed).to(_failed)
@_closing.upon(_Inputs.failed).to(_failed)
@_moving.upon(_Inputs.failed).to(_failed)
def _fail(inputs: _Inputs, core: _Core, reason: str) -> None:
    if core.state is DrainState.DRAINED:
        return  # a bridge's failure as the node stops: the drain is done
    core.state, core.reason = DrainState.FAILED, reason
    core.on_failed(reason)


@_serving.upon(_Inputs.failed).loop()
@_failed.upon(_Inputs.failed).loop()
def _failed_again(inputs: _Inputs, core: _Core, reason: str) -> None:
    """A late failure: the first reason stays."""


@_serving.upon(_Inputs.emptied).loop()
@_failed.upon(_Inputs.emptied).loop()
def _emptied_late(inputs: _Inputs, core: _Core, queue: str) -> None:
    """A queue that emptied after the drain failed: nothing to do."""


@_failed.upon(_Inputs.mapped).loop()
def _mapped_late(inputs: _Inputs, core: _Core, failover: FailoverMap) -> None:
    """The map, after the drain failed: nothing to do."""


@_failed.upon(_Inputs.closed).loop()
def _closed_late(inputs: _Inputs, core: _Core, depths: Mapping[str, int]) -> None:
    """Closed, after the drain failed: nothing more to do."""


@_finding.upon(_Inputs.start).loop()
@_closing.upon(_Inputs.start).loop()
@_moving.upon(_Inputs.start).loop()
def _again(inputs: _Inputs, core: _Core) -> None:
    """Asked to drain while draining: the drain goes on."""


_Machine = _builder.build()


class Drain:
    """A node's drain: feed it what happened; it calls its actions. See the module
    docstring."""

    def __init__(
        self,
        node: str,
        actions: IDrainActions,
        depth: Callable[[str], int] = lambda _: 0,
        on_failed: Callable[[str], None] = lambda reason: None,
    ) -> None:
        """``depth`` tells a queue's depth now (for the progress); ``on_failed`` is told
        why when the drain fails."""
        self._core = _Core(node, actions, on_failed)
        self._machine = _Machine(self._core)
        self._depth = depth
        """A queue's depth now, for the progress."""

    @property
    def state(self) -> DrainState:
        return self._core.state

    @property
    def inputs(self) -> _Inputs:
        return self._machine

    def progress(self) -> DrainProgress:
        core = self._core
        return DrainProgress(
            core.state,
            core.target,
            core.reason,
            tuple(
                QueueProgress(name, at_start, self._depth(name) if name in core.moving else 0)
                for name, at_start in core.at_start.items()
            ),
        )
