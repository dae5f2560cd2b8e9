"""The cluster view: who the members are, in the order they joined.

Every member keeps one, and a failover policy (:mod:`bridge.ha.failover`) turns it into
the failover map; a view is a plain value, so equal views give every member the same map.
Changes are pure: :meth:`ClusterView.joined` and :meth:`ClusterView.left` return a new
view, and :func:`compare` says what changed between two.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs


@attrs.frozen
class Member:
    """One member: its node id, the URLs clients reach it at, and its host id."""

    node_id: str
    urls: tuple[str, ...]
    host_id: str
    """The machine it runs on, by a machine id rather than an address: two members on one
    machine count as one host, however many addresses it has."""


def _unique_ids(
    view: ClusterView, attribute: attrs.Attribute[tuple[Member, ...]], value: tuple[Member, ...]
) -> None:
    ids = [member.node_id for member in value]
    if len(set(ids)) != len(ids):
        repeated = sorted({each for each in ids if ids.count(each) > 1})
        raise ValueError(f"a view lists each node once; repeated: {', '.join(repeated)}")


@attrs.frozen
class ClusterView:
    """The members in join order, each node id once."""

    members: tuple[Member, ...] = attrs.field(default=(), validator=_unique_ids)

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(member.node_id for member in self.members)

    def __iter__(self) -> Iterator[Member]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)

    def __contains__(self, node_id: object) -> bool:
        return any(member.node_id == node_id for member in self.members)

    def get(self, node_id: str) -> Member | None:
        """The member of that node id, or None."""
        return next((member for member in self.members if member.node_id == node_id), None)

    def joined(self, member: Member) -> ClusterView:
        """This view with ``member`` last; a node id already present keeps its place and
        takes the new URLs and host id (a member that restarted before it was seen to
        leave has not moved in the join order)."""
        if member.node_id in self:
            return ClusterView(tuple(member if m.node_id == member.node_id else m for m in self))
        return ClusterView((*self.members, member))

    def left(self, node_id: str) -> ClusterView:
        """This view without that node (the same view if it is not a member)."""
        return ClusterView(tuple(m for m in self.members if m.node_id != node_id))


@attrs.frozen
class ViewChange:
    """What turns one view into another, by node id."""

    joined: tuple[str, ...] = ()
    """Members of the new view only, in its order."""
    left: tuple[str, ...] = ()
    """Members of the old view only, in its order."""
    changed: tuple[str, ...] = ()
    """Members of both whose URLs or host id differ."""
    reordered: bool = False
    """The members of both are not in the same order in the two views."""

    def __bool__(self) -> bool:
        return bool(self.joined or self.left or self.changed or self.reordered)


def compare(old: ClusterView, new: ClusterView) -> ViewChange:
    """What changed from ``old`` to ``new`` (false when the views are equal)."""
    kept_old = [member for member in old if member.node_id in new]
    kept_new = [member for member in new if member.node_id in old]
    return ViewChange(
        joined=tuple(member.node_id for member in new if member.node_id not in old),
        left=tuple(member.node_id for member in old if member.node_id not in new),
        changed=tuple(m.node_id for m in kept_new if m != old.get(m.node_id)),
        reordered=[m.node_id for m in kept_old] != [m.node_id for m in kept_new],
    )
