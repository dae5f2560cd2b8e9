"""A node's activation as an automat machine, sans-IO: inputs are what happened (the lease
was acquired, renewed, refused, a renewal failed, the deadline passed, the node finished
starting or stopping), outputs are calls on :class:`IActivationActions`, which the node's
glue performs and answers with further inputs. Nothing here waits or sleeps.

STARTING → BACKUP (nothing open, trying to acquire) → ACTIVATING (lease held: load the
store, open the acceptors, start the bridges) → LIVE (only once fully started) → FENCED
(stopping to serve: acceptors closed, bridges paused, in-flight sends failed) → BACKUP
again; a soft failover takes LIVE the same way; STOPPING → STOPPED from anywhere.

A pair without a lease fences when it cannot show it is still live (``stale``).

Fail closed: a renewal that is refused (the lease is another's, or the epoch moved on)
fences at once; one that fails (an error, a timeout) does not extend the deadline, so
the node fences at the deadline unless a later renewal lands first (:mod:`bridge.ha.fence`).
The acquire sets the deadline here; the renewals move it on from the lease's thread
(:mod:`bridge.ha.renewer`), so the inputs about them only report what already happened.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Protocol

from automat import TypeMachineBuilder
from zope.interface import Interface

from bridge.ha.fence import Fence


class HaState(StrEnum):
    STARTING = "STARTING"
    BACKUP = "BACKUP"
    ACTIVATING = "ACTIVATING"
    LIVE = "LIVE"
    FENCED = "FENCED"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"


class IActivationActions(Interface):
    """What the node's glue does for the machine."""

    def acquire() -> None:
        """Try to acquire the lease; answer ``acquired(started)`` or ``not_acquired()``."""

    def activate() -> None:
        """Load the store, open the acceptors, start the bridges; answer ``started()``."""

    def deactivate(reason: str) -> None:
        """Stop serving at once: close the acceptors, pause the bridges, fail the in-flight
        sends back to their producers; answer ``deactivated()``."""

    def release() -> None:
        """At a clean stop: give the lease up if this node holds it (a backup can take it
        at once), then answer ``stopped()``."""


class _Inputs(Protocol):
    def start(self) -> None: ...
    def acquired(self, started: float) -> None: ...
    def not_acquired(self) -> None: ...
    def renewed(self, started: float) -> None: ...
    def renew_failed(self) -> None: ...
    def lease_lost(self) -> None: ...
    def deadline_passed(self) -> None: ...
    def stale(self, reason: str) -> None: ...
    def started(self) -> None: ...
    def deactivated(self) -> None: ...
    def failover(self) -> None: ...
    def stop(self) -> None: ...
    def stopped(self) -> None: ...


class _Core:
    """The machine's shared data: the actions and the fence."""

    def __init__(
        self, actions: IActivationActions, fence: Fence, on_state: Callable[[HaState], None]
    ) -> None:
        self.actions = actions
        self.fence = fence
        self.on_state = on_state
        self.state = HaState.STARTING
        self.reason = ""


_builder = TypeMachineBuilder(_Inputs, _Core)
_starting = _builder.state("starting")
_backup = _builder.state("backup")
_activating = _builder.state("activating")
_live = _builder.state("live")
_fenced = _builder.state("fenced")
_stopping = _builder.state("stopping")
_stopped = _builder.state("stopped")


def _enter(core: _Core, state: HaState) -> None:
    core.state = state
    core.on_state(state)


@_starting.upon(_Inputs.start).to(_backup)
def _start(inputs: _Inputs, core: _Core) -> None:
    _enter(core, HaState.BACKUP)
    core.actions.acquire()


@_backup.upon(_Inputs.acquired).to(_activating)
def _acquired(inputs: _Inputs, core: _Core, started: float) -> None:
    core.fence.renewed(started)
    _enter(core, HaState.ACTIVATING)
    core.actions.activate()


@_backup.upon(_Inputs.not_acquired).loop()
def _not_acquired(inputs: _Inputs, core: _Core) -> None:
    core.actions.acquire()


@_activating.upon(_Inputs.started).to(_live)
def _live_now(inputs: _Inputs, core: _Core) -> None:
    _enter(core, HaState.LIVE)


@_activating.upon(_Inputs.renewed).loop()
@_live.upon(_Inputs.renewed).loop()
def _renewed(inputs: _Inputs, core: _Core, started: float) -> None:
    """The deadline moved on already, as the renewal landed, on the lease's thread
    (:meth:`Fence.extend`): a reactor that hears of it late fences no one for it."""


@_activating.upon(_Inputs.renew_failed).loop()
@_live.upon(_Inputs.renew_failed).loop()
def _renew_failed(inputs: _Inputs, core: _Core) -> None:
    """The deadline stands: the next renewal may still land before it."""


def _fence(core: _Core, reason: str) -> None:
    core.fence.clear()
    core.reason = reason
    _enter(core, HaState.FENCED)
    core.actions.deactivate(reason)


@_activating.upon(_Inputs.lease_lost).to(_fenced)
@_live.upon(_Inputs.lease_lost).to(_fenced)
def _lost(inputs: _Inputs, core: _Core) -> None:
    _fence(core, "the lease is no longer this node's")


@_activating.upon(_Inputs.deadline_passed).to(_fenced)
@_live.upon(_Inputs.deadline_passed).to(_fenced)
def _deadline(inputs: _Inputs, core: _Core) -> None:
    _fence(core, "no renewal of the lease before the deadline")


@_activating.upon(_Inputs.stale).to(_fenced)
@_live.upon(_Inputs.stale).to(_fenced)
def _stale(inputs: _Inputs, core: _Core, reason: str) -> None:
    """A pair without a lease: this node cannot show it is still the live one (``reason``:
    the quorum vote was lost, or another node's store is newer)."""
    _fence(core, reason)


@_live.upon(_Inputs.failover).to(_fenced)
def _failover(inputs: _Inputs, core: _Core) -> None:
    _fence(core, "failover asked: another node is to be live")


for _state in (_starting, _backup, _activating, _fenced, _stopping, _stopped):

    @_state.upon(_Inputs.failover).loop()
    def _no_failover(inputs: _Inputs, core: _Core) -> None:
        """Only a LIVE node hands over."""


@_fenced.upon(_Inputs.deactivated).to(_backup)
def _back(inputs: _Inputs, core: _Core) -> None:
    _enter(core, HaState.BACKUP)
    core.actions.acquire()


for _state in (_starting, _backup, _activating, _live, _fenced):

    @_state.upon(_Inputs.stop).to(_stopping)
    def _stop(inputs: _Inputs, core: _Core) -> None:
        core.fence.clear()
        _enter(core, HaState.STOPPING)
        core.actions.deactivate("the node is shutting down")
        core.actions.release()


@_stopping.upon(_Inputs.stopped).to(_stopped)
def _done(inputs: _Inputs, core: _Core) -> None:
    _enter(core, HaState.STOPPED)


# Late answers: a statement or a step that finishes after the state moved on changes nothing.
for _state in (_starting, _activating, _live, _fenced, _stopping, _stopped):

    @_state.upon(_Inputs.acquired).loop()
    def _late_acquired(inputs: _Inputs, core: _Core, started: float) -> None:
        """Acquired while not waiting for it: the next renewal's refusal or the deadline
        settles it; a stopping node lets the lease expire."""

    @_state.upon(_Inputs.not_acquired).loop()
    def _late_not_acquired(inputs: _Inputs, core: _Core) -> None:
        """No longer waiting for the lease."""


for _state in (_starting, _backup, _fenced, _stopping, _stopped):

    @_state.upon(_Inputs.renewed).loop()
    def _late_renewed(inputs: _Inputs, core: _Core, started: float) -> None:
        """A renewal answered after the node stopped serving: it serves no more for it."""

    @_state.upon(_Inputs.renew_failed).loop()
    def _late_failed(inputs: _Inputs, core: _Core) -> None:
        """Nothing to fence."""

    @_state.upon(_Inputs.lease_lost).loop()
    def _late_lost(inputs: _Inputs, core: _Core) -> None:
        """Nothing to fence."""

    @_state.upon(_Inputs.deadline_passed).loop()
    def _late_deadline(inputs: _Inputs, core: _Core) -> None:
        """Nothing to fence."""

    @_state.upon(_Inputs.stale).loop()
    def _late_stale(inputs: _Inputs, core: _Core, reason: str) -> None:
        """Nothing to fence."""


for _state in (_starting, _backup, _live, _fenced, _stopping, _stopped):

    @_state.upon(_Inputs.started).loop()
    def _late_started(inputs: _Inputs, core: _Core) -> None:
        """An activation that finished after the node was fenced or stopped: the fencing's
        deactivation closes what it opened."""


for _state in (_starting, _backup, _activating, _live, _stopping, _stopped):

    @_state.upon(_Inputs.deactivated).loop()
    def _late_deactivated(inputs: _Inputs, core: _Core) -> None:
        """A deactivation's answer when none is awaited (a stop's)."""


@_live.upon(_Inputs.start).loop()
@_backup.upon(_Inputs.start).loop()
@_activating.upon(_Inputs.start).loop()
@_fenced.upon(_Inputs.start).loop()
@_stopping.upon(_Inputs.start).loop()
@_stopped.upon(_Inputs.start).loop()
def _start_again(inputs: _Inputs, core: _Core) -> None:
    """Started already."""


@_stopping.upon(_Inputs.stop).loop()
@_stopped.upon(_Inputs.stop).loop()
def _stop_again(inputs: _Inputs, core: _Core) -> None:
    """The first stop goes on."""


for _state in (_starting, _backup, _activating, _live, _fenced, _stopped):

    @_state.upon(_Inputs.stopped).loop()
    def _late_stopped(inputs: _Inputs, core: _Core) -> None:
        """Not stopping."""


_Machine = _builder.build()


class Activation:
    """One node's activation: feed it inputs, read ``state`` and ``serving``."""

    def __init__(
        self,
        actions: IActivationActions,
        fence: Fence,
        on_state: Callable[[HaState], None] = lambda state: None,
    ) -> None:
        """``on_state`` hears each state entered, as it is entered."""
        self._core = _Core(actions, fence, on_state)
        self.inputs: _Inputs = _Machine(self._core)

    @property
    def state(self) -> HaState:
        return self._core.state

    @property
    def reason(self) -> str:
        """Why the node last stopped serving ("" if it never did)."""
        return self._core.reason

    @property
    def fence(self) -> Fence:
        return self._core.fence

    @property
    def serving(self) -> bool:
        """LIVE with a deadline not yet passed: the only case a node may serve in."""
        return self._core.state is HaState.LIVE and self._core.fence.valid
