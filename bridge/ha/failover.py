"""Failover policies: a cluster view in, each member's ordered failover list out.

Every member and every client must agree on where a dead member's queues went, so a
policy is a pure function of the view: no clock, no randomness, no Python ``hash()``
(salted per process). Two are built in, chosen by ``[cluster] failover-policy``:

- ``ring`` (the default): the members after the node in join order, wrapping around;
- ``rendezvous``: highest-random-weight hashing, so a member's list depends on the set of
  members, not their order, and a join or a leave moves only that member in each list.

Both keep a node's queues off its own host: a list holds the members of other hosts only,
and the members of the node's own host only when no other host is in the view (a cluster
on one machine still survives a process's death); in the view without the last other
host, the same-host members come in.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Mapping
from typing import cast

import attrs
from zope.interface import Interface, implementer
from zope.interface.exceptions import Invalid
from zope.interface.verify import verifyObject

from bridge.ha.view import ClusterView, Member

FailoverMap = Mapping[str, tuple[str, ...]]
"""Each member's node id, in view order, with the node ids it fails over to, first
choice first."""


class PolicyError(ValueError):
    """A failover policy that cannot be loaded, or a map that breaks the rules."""


class IFailoverPolicy(Interface):
    """Turns a view into the failover map."""

    def failover_map(view: ClusterView) -> FailoverMap:
        """Every member of ``view`` with its failover list: never the member itself, no
        node twice, only members of the view. The same view must give the same map in any
        process, on any machine."""


def candidates(view: ClusterView, member: Member) -> list[Member]:
    """Who ``member`` may fail over to, in view order: the members of other hosts, or,
    when the view has no other host, the other members of its own."""
    others = [each for each in view if each.node_id != member.node_id]
    elsewhere = [each for each in others if each.host_id != member.host_id]
    return elsewhere or others


@implementer(IFailoverPolicy)
@attrs.frozen
class RingPolicy:
    """The members after the node in join order, wrapping around (its candidates only):
    with each member on a host of its own, every member is the first choice of exactly
    one other, so one death moves its queues to one member and loads no other."""

    def failover_map(self, view: ClusterView) -> FailoverMap:
        members = view.members
        result: dict[str, tuple[str, ...]] = {}
        for index, member in enumerate(members):
            allowed = {each.node_id for each in candidates(view, member)}
            after = (*members[index + 1 :], *members[:index])
            result[member.node_id] = tuple(m.node_id for m in after if m.node_id in allowed)
        return result


def weight(node_id: str, candidate_id: str) -> int:
    """The rendezvous weight of ``candidate_id`` for the queues of ``node_id``: BLAKE2b of
    both ids (each length-prefixed, so no two pairs share an input), the same everywhere."""
    digest = hashlib.blake2b(digest_size=8, person=b"txbridge.hrw")
    for part in (node_id, candidate_id):
        encoded = part.encode()
        digest.update(len(encoded).to_bytes(4, "big"))
        digest.update(encoded)
    return int.from_bytes(digest.digest(), "big")


@implementer(IFailoverPolicy)
@attrs.frozen
class RendezvousPolicy:
    """The node's candidates by descending :func:`weight` (node id breaks a tie): a list
    depends only on which members are in the view, so a member that joins or leaves is
    inserted into or removed from each list and the other members keep their order."""

    def failover_map(self, view: ClusterView) -> FailoverMap:
        return {
            member.node_id: tuple(
                each.node_id
                for each in sorted(
                    candidates(view, member),
                    key=lambda each: (-weight(member.node_id, each.node_id), each.node_id),
                )
            )
            for member in view
        }


BUILT_IN: Mapping[str, Callable[[], IFailoverPolicy]] = {
    "ring": RingPolicy,
    "rendezvous": RendezvousPolicy,
}
"""The policies ``failover-policy`` names without a module."""


def load_policy(spec: str) -> IFailoverPolicy:
    """The policy ``spec`` names: ``ring``, ``rendezvous``, or ``package.module:Class``, a
    class that implements :class:`IFailoverPolicy`, made with no arguments."""
    if spec in BUILT_IN:
        return BUILT_IN[spec]()
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        names = ", ".join(repr(name) for name in BUILT_IN)
        raise PolicyError(f"expected {names} or 'package.module:Class', got {spec!r}")
    try:
        found: object = importlib.import_module(module_name)
    except Exception as error:  # the module's own code may raise anything
        raise PolicyError(
            f"cannot import {module_name!r}: {type(error).__name__}: {error}"
        ) from None
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise PolicyError(f"module {module_name!r} has no {attribute!r}") from None
    if not isinstance(found, type) or not IFailoverPolicy.implementedBy(found):
        raise PolicyError(
            f"{spec!r} is not a class that implements IFailoverPolicy "
            f"(bridge.ha.failover; declare it with @implementer(IFailoverPolicy))"
        )
    make = cast(Callable[[], object], found)
    try:
        policy = make()
    except Exception as error:  # its constructor may raise anything
        raise PolicyError(f"{spec!r}() failed: {type(error).__name__}: {error}") from None
    try:
        verifyObject(IFailoverPolicy, policy)
    except Invalid as error:
        raise PolicyError(f"{spec!r} does not provide IFailoverPolicy: {error}") from None
    return cast(IFailoverPolicy, policy)


def checked_map(policy: IFailoverPolicy, view: ClusterView) -> FailoverMap:
    """``policy``'s map of ``view`` in view order, or PolicyError saying which rule it
    breaks: every member once, each with a list of other members, none twice."""
    found = policy.failover_map(view)
    if set(found) != set(view.node_ids):
        raise PolicyError(
            f"the map must list each member of the view once, {sorted(view.node_ids)}, "
            f"got {sorted(found)}"
        )
    result: dict[str, tuple[str, ...]] = {}
    for node_id in view.node_ids:
        failover = tuple(found[node_id])
        strangers = [each for each in failover if each not in view or each == node_id]
        if strangers:
            raise PolicyError(f"{node_id}'s list names {strangers[0]!r}: not another member")
        if len(set(failover)) != len(failover):
            raise PolicyError(f"{node_id}'s list names a member twice: {list(failover)}")
        result[node_id] = failover
    return result
