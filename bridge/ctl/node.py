"""``txbridge node --config node.toml``: run a node in the foreground, as
``twistd -n txbridge --config node.toml`` does (it is that, with the configuration checked
first so a mistake is one line on stderr and exit status 2)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from twisted.scripts.twistd import run as twistd

from bridge.config.node import load_node_config
from security.errors import ConfigError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "node",
        help="run a node in the foreground",
        description="Run a node from its configuration file until SIGTERM or SIGINT.",
    )
    parser.add_argument("--config", "-c", type=Path, required=True, help="the node's TOML file")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        load_node_config(args.config)
    except ConfigError as error:
        print(f"txbridge node: {error}", file=sys.stderr)
        return 2
    sys.argv = ["twistd", "--nodaemon", "--pidfile=", "txbridge", "--config", str(args.config)]
    twistd()
    return 0
