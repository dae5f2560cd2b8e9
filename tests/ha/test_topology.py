"""A member's topology (bridge/ha/topology.py): first-hand knowledge only, members by node
id whatever order their links came up in, the failover map of that view, and who serves a
store."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridge.ha.failover import RingPolicy
from bridge.ha.topology import Topology
from bridge.ha.view import Member

A = Member("a", ("tcp://h1:1",), "h1")
B = Member("b", ("tcp://h2:2",), "h2")
C = Member("c", ("tcp://h2:3",), "h2")


def topology() -> Topology:
    return Topology(A, ("a",), RingPolicy())


def test_alone_the_node_serves_its_store_and_fails_over_to_nobody():
    alone = topology()
    [entry] = alone.entries
    assert (entry.member, entry.serves, entry.failover) == (A, ("a",), ())
    assert alone.serves("a") and not alone.serves("b")
    assert alone.server_of("a") == A and alone.server_of("b") is None


def test_a_member_is_known_while_a_link_with_it_is_up():
    seen = topology()
    assert seen.linked("in-b", B, ("b",))
    assert seen.linked("out-c", C, ("x",))
    assert seen.view.node_ids == ("a", "b", "c")
    assert seen.server_of("x") == C
    assert {e.member.node_id: e.failover for e in seen.entries} == {
        "a": ("b", "c"),
        "b": ("a",),
        "c": ("a",),
    }
    assert seen.linked("out-b", B, ("b",)) is False  # a second link changes nothing
    assert seen.unlinked("in-b") is False  # b is still linked
    assert seen.unlinked("out-b")
    assert seen.view.node_ids == ("a", "c")
    assert seen.unlinked("out-b") is False  # gone already


def test_a_draining_node_serves_nothing_and_keeps_its_place_in_the_map():
    seen = topology()
    seen.linked("in-b", B, ("b",))
    assert seen.failover_of("a") == ("b",) and seen.member("b") == B
    assert seen.serve_nothing()
    assert not seen.serves("a") and seen.server_of("a") is None
    assert [(e.member.node_id, e.serves) for e in seen.entries] == [("a", ()), ("b", ("b",))]
    assert seen.failover_of("a") == ("b",)
    assert seen.serve_nothing() is False  # nothing more changes
    assert seen.failover_of("x") == () and seen.member("x") is None


def test_a_link_to_itself_is_ignored():
    seen = topology()
    assert seen.linked("self", Member("a", ("tcp://other:9",), "h9"), ("z",)) is False
    assert seen.view.node_ids == ("a",)


def test_the_latest_link_gives_a_member_s_record():
    seen = topology()
    seen.linked(1, B, ("b",))
    seen.linked(2, Member("b", ("tcp://h2:22",), "h2"), ("a",))  # b restarted, took a over
    assert seen.server_of("a") == A  # this node first
    assert seen.entries[1].serves == ("a",)
    assert seen.entries[1].member.urls == ("tcp://h2:22",)


@given(st.permutations([("b", B), ("c", C)]))
def test_every_link_order_gives_the_same_entries(order):
    seen = topology()
    for link, member in order:
        seen.linked(link, member, (member.node_id,))
    expected = topology()
    expected.linked("b", B, ("b",))
    expected.linked("c", C, ("c",))
    assert seen.entries == expected.entries
