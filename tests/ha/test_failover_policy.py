"""Failover policies: the same view gives the same map in every process; a list never
names its node, never a node twice, and never a member of the node's own host while
another host is in the view; the ring follows join order; a join or a leave moves only
that member (rendezvous by its hashing; the ring as it appends a newcomer). And
``failover-policy`` names a class that must implement the interface."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from zope.interface import implementer

from bridge.ha.failover import (
    IFailoverPolicy,
    PolicyError,
    RendezvousPolicy,
    RingPolicy,
    checked_map,
    load_policy,
    weight,
)
from bridge.ha.view import ClusterView, Member
from tests.processes import ROOT

POLICIES = [RingPolicy(), RendezvousPolicy()]


def member(node_id: str, host_id: str) -> Member:
    return Member(node_id, (f"tcp://{node_id}.example:61616",), host_id)


FIVE = ClusterView(tuple(member(n, "h1" if n in "ace" else "h2") for n in "abcde"))
"""Five members on two hosts, joined in the order a to e."""
APART = ClusterView(tuple(member(n, f"host-{n}") for n in "abcde"))
"""Five members, each on a host of its own."""

EXPECTED = {
    ("ring", "FIVE"): {
        "a": ("b", "d"),
        "b": ("c", "e", "a"),
        "c": ("d", "b"),
        "d": ("e", "a", "c"),
        "e": ("b", "d"),
    },
    ("rendezvous", "FIVE"): {
        "a": ("d", "b"),
        "b": ("a", "e", "c"),
        "c": ("d", "b"),
        "d": ("a", "c", "e"),
        "e": ("b", "d"),
    },
    ("ring", "APART"): {
        "a": ("b", "c", "d", "e"),
        "b": ("c", "d", "e", "a"),
        "c": ("d", "e", "a", "b"),
        "d": ("e", "a", "b", "c"),
        "e": ("a", "b", "c", "d"),
    },
    ("rendezvous", "APART"): {
        "a": ("c", "d", "e", "b"),
        "b": ("a", "d", "e", "c"),
        "c": ("d", "a", "e", "b"),
        "d": ("a", "b", "c", "e"),
        "e": ("b", "a", "c", "d"),
    },
}
"""Fixed outputs: any change to a policy's answer is a change every member and client of a
mixed-version cluster would disagree on."""


@st.composite
def views(draw: st.DrawFn, min_size: int = 0) -> ClusterView:
    """Up to eight members on up to three hosts, in any join order."""
    ids = draw(st.lists(st.sampled_from("abcdefgh"), unique=True, min_size=min_size, max_size=8))
    hosts = st.sampled_from(["h1", "h2", "h3"])
    return ClusterView(tuple(member(each, draw(hosts)) for each in ids))


@pytest.mark.parametrize(("name", "view"), [("FIVE", FIVE), ("APART", APART)])
@pytest.mark.parametrize("policy", ["ring", "rendezvous"])
def test_a_fixed_view_gives_the_fixed_map(policy, name, view):
    assert dict(load_policy(policy).failover_map(view)) == EXPECTED[policy, name]


def test_the_map_is_the_same_in_other_processes():
    """Python's own hash() differs per process (PYTHONHASHSEED): the map must not."""
    code = (
        "import json, sys\n"
        "from bridge.ha.failover import load_policy\n"
        "from tests.ha.test_failover_policy import FIVE, APART\n"
        "print(json.dumps({p: [load_policy(p).failover_map(v) for v in (FIVE, APART)]"
        " for p in ('ring', 'rendezvous')}))\n"
    )
    expected = {
        policy: [EXPECTED[policy, "FIVE"], EXPECTED[policy, "APART"]]
        for policy in ("ring", "rendezvous")
    }
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        found = json.loads(done.stdout)
        assert {
            policy: [{node: tuple(lst) for node, lst in each.items()} for each in maps]
            for policy, maps in found.items()
        } == expected


def test_weights_are_blake2b_of_both_ids_not_pythons_hash():
    assert weight("a", "b") == 0x1781946C5DFD0C2B
    assert weight("a", "b") != weight("b", "a")
    assert weight("ab", "c") != weight("a", "bc")


@given(policy=st.sampled_from(POLICIES), view=views())
def test_every_list_names_other_members_once(policy, view):
    found = policy.failover_map(view)
    assert list(found) == list(view.node_ids)
    for node_id, failover in found.items():
        assert node_id not in failover
        assert len(set(failover)) == len(failover)
        assert set(failover) <= set(view.node_ids)
    assert checked_map(policy, view) == found


@given(policy=st.sampled_from(POLICIES), view=views())
def test_never_the_same_host_while_another_host_exists(policy, view):
    """A list holds every member of the other hosts and none of the node's own; only a
    cluster on one host fails over within it, to every other member."""
    for node_id, failover in policy.failover_map(view).items():
        own = view.get(node_id)
        assert own is not None
        others = {m.node_id for m in view if m.node_id != node_id}
        elsewhere = {m.node_id for m in view if m.host_id != own.host_id}
        assert set(failover) == (elsewhere or others)


@given(policy=st.sampled_from(POLICIES), view=views())
def test_the_same_view_gives_the_same_map(policy, view):
    again = ClusterView(tuple(Member(m.node_id, m.urls, m.host_id) for m in view))
    assert type(policy)().failover_map(again) == policy.failover_map(view)


@given(policy=st.sampled_from(POLICIES), view=views(min_size=1), data=st.data())
def test_a_leave_only_removes_the_member_that_left(policy, view, data):
    """For each node that stays, the member that left is taken out of its list and the
    rest keep their order, unless the leave changed whether the node has another host
    (its last other-host member left: its own host's members come in)."""
    gone = data.draw(st.sampled_from(view.node_ids))
    after = view.left(gone)
    before_map, after_map = policy.failover_map(view), policy.failover_map(after)
    assert gone not in after_map
    for each in after:
        had_other = any(m.host_id != each.host_id for m in view)
        has_other = any(m.host_id != each.host_id for m in after)
        if had_other != has_other:
            continue
        assert after_map[each.node_id] == tuple(n for n in before_map[each.node_id] if n != gone)


@given(
    policy=st.sampled_from(POLICIES),
    view=views(),
    newcomer=st.sampled_from("ijk"),
    host=st.sampled_from(["h1", "h2", "h4"]),
)
def test_a_join_only_inserts_the_member_that_joined(policy, view, newcomer, host):
    """The mirror of a leave: each list gains the newcomer and the rest keep their order,
    unless the join gave a node its first other host."""
    after = view.joined(member(newcomer, host))
    before_map, after_map = policy.failover_map(view), policy.failover_map(after)
    for each in view:
        had_other = any(m.host_id != each.host_id for m in view)
        has_other = any(m.host_id != each.host_id for m in after)
        if had_other != has_other:
            continue
        without = tuple(n for n in after_map[each.node_id] if n != newcomer)
        assert without == before_map[each.node_id]


@given(view=views(), data=st.data())
def test_rendezvous_ignores_the_join_order(view, data):
    shuffled = ClusterView(tuple(data.draw(st.permutations(view.members))))
    assert dict(RendezvousPolicy().failover_map(shuffled)) == dict(
        RendezvousPolicy().failover_map(view)
    )


@given(view=views())
def test_the_ring_follows_join_order_from_the_node(view):
    """Each list goes round the view from the node: its members' places after the node's
    (counted round the ring) only grow."""
    places = {node_id: index for index, node_id in enumerate(view.node_ids)}
    size = len(view)
    for node_id, failover in RingPolicy().failover_map(view).items():
        distances = [(places[n] - places[node_id]) % size for n in failover]
        assert distances == sorted(distances)


@given(view=views(min_size=2))
def test_the_ring_on_separate_hosts_gives_each_member_one_first_choice(view):
    """With a host each, every member is the first choice of exactly one other: one death
    loads one member."""
    apart = ClusterView(tuple(member(m.node_id, m.node_id) for m in view))
    firsts = [failover[0] for failover in RingPolicy().failover_map(apart).values()]
    assert sorted(firsts) == sorted(apart.node_ids)


def test_one_member_has_nowhere_to_go():
    for policy in POLICIES:
        assert dict(policy.failover_map(ClusterView((member("a", "h1"),)))) == {"a": ()}
        assert dict(policy.failover_map(ClusterView())) == {}


# Policies named by "package.module:Class".


@implementer(IFailoverPolicy)
@attrs.frozen
class ReversedPolicy:
    """A policy of the test's own: the other members in reverse join order."""

    def failover_map(self, view: ClusterView) -> dict[str, tuple[str, ...]]:
        ids = view.node_ids
        return {n: tuple(m for m in reversed(ids) if m != n) for n in ids}


class NotAPolicy:
    def failover_map(self, view: ClusterView) -> dict[str, tuple[str, ...]]:
        return {}


@implementer(IFailoverPolicy)
class HalfAPolicy:
    """Declares the interface without its method."""


@implementer(IFailoverPolicy)
class NeedsArguments:
    def __init__(self, seed: int) -> None:
        self.seed = seed

    def failover_map(self, view: ClusterView) -> dict[str, tuple[str, ...]]:
        return {}


@implementer(IFailoverPolicy)
class ListsItself:
    def failover_map(self, view: ClusterView) -> dict[str, tuple[str, ...]]:
        return {n: (n,) for n in view.node_ids}


HERE = __name__


def test_the_built_in_names():
    assert isinstance(load_policy("ring"), RingPolicy)
    assert isinstance(load_policy("rendezvous"), RendezvousPolicy)


def test_a_class_of_ones_own():
    policy = load_policy(f"{HERE}:ReversedPolicy")
    assert isinstance(policy, ReversedPolicy)
    assert dict(checked_map(policy, FIVE))["a"] == ("e", "d", "c", "b")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("rings", "expected 'ring', 'rendezvous' or 'package.module:Class', got 'rings'"),
        ("tests.ha.nowhere:Policy", "cannot import 'tests.ha.nowhere': ModuleNotFoundError"),
        (f"{HERE}:Missing", f"module {HERE!r} has no 'Missing'"),
        (f"{HERE}:NotAPolicy", "is not a class that implements IFailoverPolicy"),
        (f"{HERE}:member", "is not a class that implements IFailoverPolicy"),
        (f"{HERE}:HalfAPolicy", "does not provide IFailoverPolicy: "),
        (f"{HERE}:NeedsArguments", "NeedsArguments'() failed: TypeError"),
    ],
)
def test_a_policy_that_cannot_be_used_is_refused(spec, message):
    with pytest.raises(PolicyError) as refused:
        load_policy(spec)
    assert message in str(refused.value)


def test_a_map_that_breaks_the_rules_is_refused():
    with pytest.raises(PolicyError, match="a's list names 'a': not another member"):
        checked_map(ListsItself(), FIVE)
