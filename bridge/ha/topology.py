"""What one member knows of its cluster: itself and the members it has a link with, each
with the stores it serves, and the failover map of that view.

A plain object, fed link events and returning values (the node's glue, bridge/ctl/members.py,
makes the links). A member is known only while a link with it is up, in either direction:
knowledge is first hand, so a member that dies leaves every view as its links drop, and
no member keeps repeating a dead one's record. The view lists the members by node id, a
join order every member and client computes alike whatever order the links came up in.

A *store* is named by the node whose store it was first (``[cluster] store``, by default
the node's own name): a live node serves its store; a backup that took over serves the
store it took over. A client asks for the store its sessions were on, and is sent to the
member serving it (:meth:`Topology.server_of`).
"""

from __future__ import annotations

from collections.abc import Hashable

import attrs

from bridge.ha.failover import IFailoverPolicy, checked_map
from bridge.ha.view import ClusterView, Member


@attrs.frozen
class Known:
    """A member and the stores it serves now."""

    member: Member
    serves: tuple[str, ...]


@attrs.frozen
class Entry:
    """One member as a TOPOLOGY carries it: with its failover list."""

    member: Member
    serves: tuple[str, ...]
    failover: tuple[str, ...]


class Topology:
    """This node (``own``, serving ``serves``) and the members linked with it."""

    def __init__(self, own: Member, serves: tuple[str, ...], policy: IFailoverPolicy) -> None:
        self.own = Known(own, serves)
        self._policy = policy
        self._links: dict[Hashable, Known] = {}
        self._entries = self._compute()

    @property
    def entries(self) -> tuple[Entry, ...]:
        """The members in view order, each with its stores and failover list."""
        return self._entries

    @property
    def view(self) -> ClusterView:
        return ClusterView(tuple(entry.member for entry in self._entries))

    def linked(self, link: Hashable, member: Member, serves: tuple[str, ...]) -> bool:
        """A link with ``member`` is up (an inbound announce, or an outbound link's
        answer); True when the topology changed. A link naming this node is ignored."""
        if member.node_id == self.own.member.node_id:
            return False
        self._links[link] = Known(member, serves)
        return self._update()

    def unlinked(self, link: Hashable) -> bool:
        """That link is gone; True when the topology changed."""
        if self._links.pop(link, None) is None:
            return False
        return self._update()

    def server_of(self, store: str) -> Member | None:
        """The member that serves ``store`` (this node first), or None."""
        for entry in self._entries:
            if store in entry.serves:
                return entry.member
        return None

    def serves(self, store: str) -> bool:
        """Whether this node serves ``store``."""
        return store in self.own.serves

    def failover_of(self, node_id: str) -> tuple[str, ...]:
        """``node_id``'s failover list in this view (empty for a node not in it)."""
        for entry in self._entries:
            if entry.member.node_id == node_id:
                return entry.failover
        return ()

    def member(self, node_id: str) -> Member | None:
        """The member of that node id in this view, or None."""
        return self.view.get(node_id)

    def serve_nothing(self) -> bool:
        """This node stops serving its stores (it drains: its clients are to go to its
        failover nodes); True when the topology changed."""
        self.own = Known(self.own.member, ())
        return self._update()

    def _update(self) -> bool:
        entries = self._compute()
        changed = entries != self._entries
        self._entries = entries
        return changed

    def _compute(self) -> tuple[Entry, ...]:
        known = {each.member.node_id: each for each in self._links.values()}  # the latest
        known[self.own.member.node_id] = self.own
        ordered = [known[node_id] for node_id in sorted(known)]
        view = ClusterView(tuple(each.member for each in ordered))
        failover = checked_map(self._policy, view)
        return tuple(
            Entry(each.member, each.serves, failover[each.member.node_id]) for each in ordered
        )
