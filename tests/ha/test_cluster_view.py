"""The cluster view: members in join order, each node once; joins and leaves are pure and
undo each other; ``compare`` names what changed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.ha.view import ClusterView, Member, ViewChange, compare

NAMES = st.sampled_from("abcdefgh")


def member(node_id: str, host_id: str = "h1", port: int = 61616) -> Member:
    return Member(node_id, (f"tcp://{node_id}:{port}",), host_id)


@st.composite
def views(draw: st.DrawFn) -> ClusterView:
    ids = draw(st.lists(NAMES, unique=True, max_size=6))
    return ClusterView(tuple(member(each, draw(st.sampled_from(["h1", "h2"]))) for each in ids))


def test_a_view_lists_each_node_once():
    with pytest.raises(ValueError, match="repeated: a"):
        ClusterView((member("a"), member("b"), member("a", "h2")))


def test_members_are_in_join_order():
    view = ClusterView().joined(member("c")).joined(member("a")).joined(member("b"))
    assert view.node_ids == ("c", "a", "b")
    assert list(view) == [member("c"), member("a"), member("b")]
    assert "a" in view and "z" not in view and len(view) == 3
    assert view.get("a") == member("a") and view.get("z") is None


def test_a_member_that_joins_again_keeps_its_place_with_its_new_record():
    view = ClusterView((member("a"), member("b"), member("c")))
    moved = view.joined(member("b", "h2", 61617))
    assert moved.node_ids == ("a", "b", "c")
    assert moved.get("b") == member("b", "h2", 61617)
    assert compare(view, moved) == ViewChange(changed=("b",))


@given(views(), NAMES)
def test_joining_then_leaving_is_no_change(view, node_id):
    if node_id in view:
        return
    joined = view.joined(member(node_id))
    assert joined.node_ids == (*view.node_ids, node_id)
    assert compare(view, joined) == ViewChange(joined=(node_id,))
    assert joined.left(node_id) == view
    assert not compare(view, joined.left(node_id))


@given(views(), NAMES)
def test_leaving_keeps_the_others_in_order(view, node_id):
    left = view.left(node_id)
    assert left.node_ids == tuple(each for each in view.node_ids if each != node_id)
    assert compare(view, left) == ViewChange(left=(node_id,) if node_id in view else ())


@given(views())
def test_a_view_equals_itself_rebuilt(view):
    rebuilt = ClusterView(tuple(Member(m.node_id, m.urls, m.host_id) for m in view))
    assert rebuilt == view and hash(rebuilt) == hash(view)
    assert not compare(view, rebuilt)


def test_compare_says_who_joined_left_changed_and_whether_the_order_moved():
    old = ClusterView((member("a"), member("b"), member("c")))
    new = ClusterView((member("c"), member("a", "h2"), member("d")))
    assert compare(old, new) == ViewChange(
        joined=("d",), left=("b",), changed=("a",), reordered=True
    )
    assert compare(old, new)
