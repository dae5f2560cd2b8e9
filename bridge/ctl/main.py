"""The ``txbridge`` command line: one sub-command per module, each registering itself.

A sub-command module provides ``register(subparsers)``, which adds its parser and sets
``handler`` (a callable taking the parsed arguments and returning an exit status).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import cast

SUBCOMMANDS = (
    "bridge.audit.cli",
    "bridge.ctl.bench",
    "bridge.ctl.certs",
    "bridge.ctl.node",
    "bridge.ctl.status",
    "bridge.ctl.user",
)

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="txbridge", description="Message bridges and flow control on Twisted."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = cast(Handler, args.handler)
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
