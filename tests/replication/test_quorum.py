"""The quorum vote's machine (bridge.replication.quorum), without a reactor: whatever the
order of the voters' answers, repeats, strangers and the timeout, a ballot is won only with
``needed`` distinct grants and only by a node that may take over, and is decided once; a
voter grants each activation sequence once."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from zope.interface import implementer

from bridge.replication.quorum import Ballot, BallotState, IBallotActions, Promises

VOTERS = ("v1", "v2", "v3", "v4", "v5")


@implementer(IBallotActions)
class Actions:
    def __init__(self) -> None:
        self.asked = 0
        self.decisions: list[tuple[bool, str]] = []

    def ask(self) -> None:
        self.asked += 1

    def decided(self, won: bool, reason: str) -> None:
        self.decisions.append((won, reason))


EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("granted"), st.sampled_from((*VOTERS, "stranger")), st.integers(0, 9)),
        st.tuples(st.just("refused"), st.sampled_from((*VOTERS, "stranger")), st.integers(0, 9)),
        st.tuples(st.just("unreachable"), st.sampled_from((*VOTERS, "stranger")), st.just(0)),
        st.tuples(st.just("timed_out"), st.just(""), st.just(0)),
        st.tuples(st.just("start"), st.just(""), st.just(0)),
    ),
    max_size=30,
)


@given(
    voters=st.integers(1, len(VOTERS)),
    needed=st.data(),
    in_sync=st.booleans(),
    events=EVENTS,
)
def test_a_ballot_is_won_only_with_enough_grants_by_a_node_in_sync(voters, needed, in_sync, events):
    names = VOTERS[:voters]
    quorum = needed.draw(st.integers(1, voters))
    actions = Actions()
    ballot = Ballot(actions, names, quorum, "" if in_sync else "not in sync")
    ballot.start()
    granted: list[str] = []  # the first answer of each voter of the ballot, while asking
    answered: set[str] = set()
    for kind, voter, seen in events:
        asking = ballot.state is BallotState.ASKING
        if kind == "start":
            ballot.start()
        elif kind == "timed_out":
            ballot.timed_out()
        elif kind == "granted":
            ballot.granted(voter, seen)
        elif kind == "refused":
            ballot.refused(voter, "no", seen)
        else:
            ballot.unreachable(voter, "gone")
        if asking and voter in names and voter not in answered and kind != "start":
            answered.add(voter)
            if kind == "granted":
                granted.append(voter)
        assert len(actions.decisions) <= 1
    if not in_sync:
        assert actions.asked == 0
        assert actions.decisions == [(False, "not asked: not in sync")]
        return
    assert actions.asked == 1
    if ballot.state is BallotState.WON:
        assert actions.decisions and actions.decisions[0][0]
        assert len(set(ballot.grants)) >= quorum
        assert set(ballot.grants) <= set(names)
        assert len(set(granted)) >= quorum
    elif ballot.state is BallotState.LOST:
        assert actions.decisions and not actions.decisions[0][0]
        assert len(ballot.grants) < quorum
    else:
        assert not actions.decisions
        assert len(ballot.grants) < quorum
        assert len(answered) - len(granted) <= voters - quorum  # still winnable


def test_a_ballot_says_who_refused_and_why():
    actions = Actions()
    ballot = Ballot(actions, ("v1", "v2", "v3"), 2)
    ballot.start()
    ballot.granted("v1", 4)
    ballot.refused("v2", "the live node answers here", 5)
    ballot.unreachable("v3", "connection refused")
    assert ballot.state is BallotState.LOST
    assert ballot.seen == 5
    (won, reason), *_ = actions.decisions
    assert not won
    assert "1 of 3 voters granted, 2 needed" in reason
    assert "v2: the live node answers here" in reason
    assert "v3: unreachable: connection refused" in reason


def test_the_timeout_loses_a_ballot_still_asking():
    actions = Actions()
    ballot = Ballot(actions, ("v1", "v2", "v3"), 2)
    ballot.start()
    ballot.granted("v1", 0)
    ballot.timed_out()
    ballot.granted("v2", 0)
    assert ballot.state is BallotState.LOST
    assert actions.decisions == [
        (False, "quorum-vote-wait passed: 1 of 3 voters granted, 2 needed")
    ]


def test_a_ballot_needs_a_possible_quorum():
    with pytest.raises(ValueError, match="3 grants needed of 2 voters"):
        Ballot(Actions(), ("v1", "v2"), 3)


@given(
    st.lists(
        st.tuples(st.sampled_from(("takeover", "still-live")), st.integers(1, 6), st.booleans()),
        max_size=30,
    )
)
def test_a_voter_grants_each_sequence_once_and_never_goes_back(requests):
    promises = Promises()
    taken: list[int] = []
    for kind, sequence, live_answers in requests:
        before = promises.seen
        if kind == "takeover":
            granted, _ = promises.takeover(sequence, live_answers, "probed")
            assert granted == (sequence > before and not live_answers)
        else:
            granted, _ = promises.still_live(sequence)
            assert granted == (sequence > before)
        if granted:  # takeover or going on alone: each sequence once, to one node
            assert sequence not in taken
            taken.append(sequence)
        assert promises.seen >= before
