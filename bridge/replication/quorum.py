"""The quorum vote of a replication pair without a lease (docs/ha.md, "Quorum vote"), sans-IO.

A :class:`Ballot` is one vote, asked of the voters (the ``[cluster] members``), as an
automat machine: IDLE → ASKING → WON or LOST. It is won once ``needed`` (``quorum-size``)
distinct voters granted; lost once so many refused or could not be reached that ``needed``
grants can no longer come, or at the timeout (``quorum-vote-wait``). A ballot whose asker
may not take over (a backup that was not in sync) is lost at once, never asked. The glue
sends the requests and feeds the answers; nothing here waits or sleeps.

:class:`Promises` is a voter's side: the highest activation sequence it granted or saw,
so that two nodes never both win the same sequence (with ``quorum-size`` a majority) and
a live node asking after another node won a newer one hears that it is stale.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

import attrs
from automat import TypeMachineBuilder
from zope.interface import Interface


class BallotState(StrEnum):
    IDLE = "idle"
    ASKING = "asking"
    WON = "won"
    LOST = "lost"


class IBallotActions(Interface):
    """What the glue does for a ballot."""

    def ask() -> None:
        """Send the request to every voter and start the timeout; answer each voter with
        ``granted``, ``refused`` or ``unreachable``, and the timeout with ``timed_out``."""

    def decided(won: bool, reason: str) -> None:
        """The vote is over (called once): stop asking, close what is open."""


class _Inputs(Protocol):
    def start(self) -> None: ...
    def ineligible(self) -> None: ...
    def answered(self) -> None: ...
    def reached(self) -> None: ...
    def impossible(self) -> None: ...
    def timed_out(self) -> None: ...


@attrs.define
class _Core:
    actions: IBallotActions
    voters: tuple[str, ...]
    needed: int
    why_not: str
    grants: list[str] = attrs.Factory(list)
    refusals: dict[str, str] = attrs.Factory(dict)
    seen: int = 0
    state: BallotState = BallotState.IDLE

    def tally(self) -> str:
        refusals = "; ".join(f"{voter}: {why}" for voter, why in sorted(self.refusals.items()))
        told = f" ({refusals})" if refusals else ""
        return (
            f"{len(self.grants)} of {len(self.voters)} voters granted, {self.needed} needed{told}"
        )


_builder = TypeMachineBuilder(_Inputs, _Core)
_idle = _builder.state("idle")
_asking = _builder.state("asking")
_won = _builder.state("won")
_lost = _builder.state("lost")


def _decide(core: _Core, state: BallotState, reason: str) -> None:
    core.state = state
    core.actions.decided(state is BallotState.WON, reason)


@_idle.upon(_Inputs.start).to(_asking)
def _start(inputs: _Inputs, core: _Core) -> None:
    core.state = BallotState.ASKING
    core.actions.ask()


@_idle.upon(_Inputs.ineligible).to(_lost)
def _ineligible(inputs: _Inputs, core: _Core) -> None:
    _decide(core, BallotState.LOST, f"not asked: {core.why_not}")


@_asking.upon(_Inputs.answered).loop()
def _answered(inputs: _Inputs, core: _Core) -> None:
    """An answer was counted; the ballot's wrapper says whether that decides it."""


@_asking.upon(_Inputs.reached).to(_won)
def _reached(inputs: _Inputs, core: _Core) -> None:
    _decide(core, BallotState.WON, core.tally())


@_asking.upon(_Inputs.impossible).to(_lost)
def _impossible(inputs: _Inputs, core: _Core) -> None:
    _decide(core, BallotState.LOST, core.tally())


@_asking.upon(_Inputs.timed_out).to(_lost)
def _timed_out(inputs: _Inputs, core: _Core) -> None:
    _decide(core, BallotState.LOST, f"quorum-vote-wait passed: {core.tally()}")


for _state in (_won, _lost):

    @_state.upon(_Inputs.answered).loop()
    @_state.upon(_Inputs.timed_out).loop()
    def _late(inputs: _Inputs, core: _Core) -> None:
        """The vote is over: a late answer or timeout changes nothing."""

    @_state.upon(_Inputs.start).loop()
    @_state.upon(_Inputs.ineligible).loop()
    def _again(inputs: _Inputs, core: _Core) -> None:
        """A ballot is asked once."""


@_idle.upon(_Inputs.answered).loop()
@_idle.upon(_Inputs.timed_out).loop()
def _not_asked(inputs: _Inputs, core: _Core) -> None:
    """Not asked yet: nothing to count."""


@_asking.upon(_Inputs.start).loop()
@_asking.upon(_Inputs.ineligible).loop()
def _asked_already(inputs: _Inputs, core: _Core) -> None:
    """Asking already."""


_Machine = _builder.build()


class Ballot:
    """One vote of ``voters``, won with ``needed`` grants; ``why_not`` (non-empty) says why
    the asker may not take part, and loses the ballot unasked."""

    def __init__(
        self, actions: IBallotActions, voters: tuple[str, ...], needed: int, why_not: str = ""
    ) -> None:
        if not 0 < needed <= len(voters):
            raise ValueError(f"{needed} grants needed of {len(voters)} voters")
        self._core = _Core(actions, voters, needed, why_not)
        self._inputs: _Inputs = _Machine(self._core)

    @property
    def state(self) -> BallotState:
        return self._core.state

    @property
    def grants(self) -> tuple[str, ...]:
        return tuple(self._core.grants)

    @property
    def seen(self) -> int:
        """The highest activation sequence any voter said it granted or saw."""
        return self._core.seen

    def start(self) -> None:
        if self._core.why_not:
            self._inputs.ineligible()
        else:
            self._inputs.start()

    def granted(self, voter: str, seen: int) -> None:
        self._count(voter, None, seen)

    def refused(self, voter: str, reason: str, seen: int) -> None:
        self._count(voter, reason, seen)

    def unreachable(self, voter: str, reason: str) -> None:
        self._count(voter, f"unreachable: {reason}", 0)

    def timed_out(self) -> None:
        self._inputs.timed_out()

    def _count(self, voter: str, refusal: str | None, seen: int) -> None:
        """One voter's first answer, while asking; any other is ignored."""
        core = self._core
        if core.state is not BallotState.ASKING or voter not in core.voters:
            return
        if voter in core.grants or voter in core.refusals:
            return
        core.seen = max(core.seen, seen)
        if refusal is None:
            core.grants.append(voter)
        else:
            core.refusals[voter] = refusal
        self._inputs.answered()
        unanswered = len(core.voters) - len(core.grants) - len(core.refusals)
        if len(core.grants) >= core.needed:
            self._inputs.reached()
        elif len(core.grants) + unanswered < core.needed:
            self._inputs.impossible()


@attrs.define
class Promises:
    """A voter's memory of activation sequences (in the voter's process: a voter that
    restarts has seen none, docs/ha.md)."""

    seen: int = 0
    """The highest activation sequence granted or seen."""

    def before_probe(self, sequence: int) -> str:
        """Why a takeover at ``sequence`` is refused whatever the live node's state ("" if
        it may be granted once the live node is found unreachable)."""
        if sequence <= self.seen:
            return f"sequence {sequence} is not above {self.seen}, granted or seen before"
        return ""

    def takeover(self, sequence: int, live_answers: bool, probe: str) -> tuple[bool, str]:
        """A backup asks to take ``sequence``; ``live_answers`` is whether this voter
        reached the live node itself (``probe`` says how it went)."""
        refused = self.before_probe(sequence)  # again: another request may have won it
        if refused:
            return False, refused
        if live_answers:
            return False, f"the live node answers here ({probe})"
        self.seen = sequence
        return True, f"the live node is unreachable from here ({probe}); sequence {sequence}"

    def still_live(self, sequence: int) -> tuple[bool, str]:
        """A live node that lost its backup asks to go on alone as ``sequence`` (its own
        plus one), so that the backup's copy, now behind, can never win a takeover."""
        if sequence <= self.seen:
            return False, f"sequence {self.seen} was granted since: another node may be live"
        self.seen = sequence
        return True, f"sequence {sequence} granted: the newest here"
