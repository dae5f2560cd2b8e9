"""``txbridge cluster map CONFIG...``: the failover map the members' files give, offline.

A member's node id and host id are its own (``[node] name``, ``[cluster] host-id``), so
the map needs every member's file; they are taken as having joined in the order given,
the order the ring follows. Nothing is contacted: the map is computed as every member
computes it (docs/ha.md, "Seeing the map").
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from bridge.config.cluster import ClusterSettings
from bridge.config.node import NodeConfig, load_node_config
from bridge.ha.failover import FailoverMap, PolicyError, checked_map
from bridge.ha.view import ClusterView, Member
from security.errors import ConfigError

EXIT_CONFIG = 2
"""A file is wrong, or the files are not of one cluster."""
EXIT_POLICY = 1
"""The policy gave a map that breaks the rules."""


@attrs.frozen
class ClusterMap:
    """The members' files as a view, and its map."""

    cluster: ClusterSettings
    """The first file's ``[cluster]``, whose policy every file names."""
    view: ClusterView
    defaulted: frozenset[str]
    """Members without ``host-id``: their host id is this machine's."""
    failover: FailoverMap


def _cluster_of(config: NodeConfig) -> ClusterSettings:
    if config.cluster is None:
        raise ConfigError(str(config.source), "cluster", "is required to draw the cluster's map")
    return config.cluster


def cluster_map(paths: Sequence[Path]) -> ClusterMap:
    """Read the members' files (in join order) and compute their map; ConfigError when a
    file is wrong, two files have one node name, or they differ in cluster or policy."""
    configs = [load_node_config(path) for path in paths]
    first = _cluster_of(configs[0])
    members: list[Member] = []
    defaulted: set[str] = set()
    for config in configs:
        cluster = _cluster_of(config)
        source = str(config.source)
        if cluster.name != first.name:
            raise ConfigError(
                source,
                "cluster.name",
                f"expected {first.name!r}, as in {paths[0]}, got "
                f"{cluster.name!r}: the files must be members of one cluster",
            )
        if cluster.policy_name != first.policy_name:
            raise ConfigError(
                source,
                "cluster.failover-policy",
                f"expected {first.policy_name!r}, as in {paths[0]}, got {cluster.policy_name!r}: "
                "members with different policies disagree on the map",
            )
        if any(member.node_id == config.name for member in members):
            why = f"{config.name!r} is the node name of an earlier file"
            raise ConfigError(source, "node.name", why)
        urls = tuple(str(a.url) for a in config.acceptors if "core" in a.protocols)
        members.append(Member(config.name, urls, cluster.own_host_id()))
        if cluster.host_id is None:
            defaulted.add(config.name)
    view = ClusterView(tuple(members))
    return ClusterMap(first, view, frozenset(defaulted), checked_map(first.failover_policy, view))


def render(found: ClusterMap) -> str:
    """The map as a table: each member in join order, its host and its failover list."""
    hosts = {
        m.node_id: m.host_id + (" (this machine's)" if m.node_id in found.defaulted else "")
        for m in found.view
    }
    width_node = max(len("node"), *(len(m.node_id) for m in found.view))
    width_host = max(len("host"), *(len(host) for host in hosts.values()))
    lines = [
        f"cluster {found.cluster.name}, failover-policy {found.cluster.policy_name}, "
        f"{len(found.view)} member(s) in join order",
        f"{'node':<{width_node}}  {'host':<{width_host}}  fails over to",
    ]
    for member in found.view:
        failover = ", ".join(found.failover[member.node_id]) or "(nobody)"
        lines.append(
            f"{member.node_id:<{width_node}}  {hosts[member.node_id]:<{width_host}}  {failover}"
        )
    return "\n".join(lines)


def as_json(found: ClusterMap) -> dict[str, Any]:
    """The map as a JSON document."""
    return {
        "cluster": found.cluster.name,
        "failover_policy": found.cluster.policy_name,
        "members": [
            {
                "node": member.node_id,
                "host": member.host_id,
                "host_defaulted": member.node_id in found.defaulted,
                "urls": list(member.urls),
                "failover": list(found.failover[member.node_id]),
            }
            for member in found.view
        ],
    }


def _map(args: argparse.Namespace) -> int:
    try:
        found = cluster_map(args.configs)
    except ConfigError as error:
        print(f"txbridge cluster map: {error}", file=sys.stderr)
        return EXIT_CONFIG
    except PolicyError as error:
        print(f"txbridge cluster map: failover-policy {error}", file=sys.stderr)
        return EXIT_POLICY
    print(json.dumps(as_json(found), indent=2) if args.json else render(found))
    return 0


def register(subparsers: Any) -> None:
    """Add ``txbridge cluster`` and its actions to the dispatcher's sub-commands."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "cluster",
        help="a cluster's failover map, from its members' files",
        description="Show what the members of a cluster compute from their configuration "
        "files ([cluster]), without contacting them.",
        epilog="example:\n  txbridge cluster map a.toml b.toml c.toml",
    )
    actions = parser.add_subparsers(dest="cluster_action", required=True, metavar="ACTION")
    shown: argparse.ArgumentParser = actions.add_parser(
        "map",
        help="each member's failover list",
        description="Each member's failover list, computed as the members compute it, from "
        "every member's file, taken as having joined in the order given.",
        epilog="example:\n  txbridge cluster map a.toml b.toml c.toml --json",
    )
    shown.add_argument(
        "configs", nargs="+", type=Path, metavar="CONFIG", help="a member's node file"
    )
    shown.add_argument("--json", action="store_true", help="print the map as JSON instead")
    shown.set_defaults(handler=_map)
