"""``txbridge node --config node.toml``: run a node in the foreground, as
``twistd -n txbridge --config node.toml`` does (it is that, with the configuration checked
first so a mistake is one line on stderr and exit status 2, and a node that cannot start
here, for its data directory or its security files, one line and exit status 1).

twistd is given the node's service maker directly, not through Twisted's plugin search,
so this works from any install, with or without ``twisted/plugins`` on the path."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from twisted.python import usage
from twisted.scripts.twistd import ServerOptions, runApp  # type: ignore[attr-defined]

from bridge.config.node import load_node_config
from bridge.ctl.logs import observer
from bridge.ctl.preflight import check_startable
from bridge.ctl.twistd import ServiceMaker
from security.errors import ConfigError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "node",
        help="run a node in the foreground",
        description="Run a node from its configuration file until SIGTERM or SIGINT "
        "(SIGHUP reloads its bridges, users and security settings; docs/node.md).",
        epilog="example:\n  txbridge node --config node.toml",
    )
    parser.add_argument("--config", "-c", type=Path, required=True, help="the node's TOML file")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="run the reactor under cProfile and write its statistics (pstats) to FILE "
        "when the node stops: a developer's measurement, and it slows the node",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_node_config(args.config)
    except ConfigError as error:
        print(f"txbridge node: {error}", file=sys.stderr)
        return 2
    try:
        check_startable(config)
    except ConfigError as error:
        print(f"txbridge node: cannot start: {error}", file=sys.stderr)
        return 1
    options: Any = ServerOptions()
    options._getPlugins = _the_node
    profiling = []
    if args.profile is not None:
        profiling = [f"--profile={args.profile}", "--profiler=cprofile", "--savestats"]
    try:
        options.parseOptions(
            [
                "--nodaemon",
                "--pidfile=",
                f"--logger={observer.__module__}.{observer.__name__}",
                *profiling,
                "txbridge",
                "--config",
                str(args.config),
            ]
        )
    except usage.UsageError as error:
        print(f"txbridge node: {error}", file=sys.stderr)
        return 2
    runApp(options)
    return 0


def _the_node(interface: object, package: object = None) -> list[ServiceMaker]:
    """The one twistd sub-command ``txbridge node`` runs: no plugin search."""
    return [ServiceMaker()]
