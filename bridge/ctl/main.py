"""The ``txbridge`` command line: one sub-command per module, each registering itself.

A sub-command module provides ``register(subparsers)``, which adds its parser (with a
``description`` saying what it does and an ``epilog`` giving an example) and sets
``handler`` (a callable taking the parsed arguments and returning an exit status).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import cast

from bridge.ctl.lean import import_twisted_without_tls

SUBCOMMANDS = (
    "bridge.audit.cli",
    "bridge.ctl.bench",
    "bridge.ctl.certs",
    "bridge.ctl.cluster",
    "bridge.ctl.node",
    "bridge.ctl.status",
    "bridge.ctl.user",
)

Handler = Callable[[argparse.Namespace], int]


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that a text of several lines (an epilog's examples)
    keeps its lines, as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def installed_version() -> str:
    """The version of the installed txbridge distribution."""
    try:
        return version("txbridge")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="txbridge",
        description="Message bridges and flow control on Twisted.",
        epilog="example:\n  txbridge node --config node.toml\n"
        "  txbridge COMMAND --help   (what COMMAND does, with an example)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(subparsers)
    for _, each in walk(parser):
        each.formatter_class = HelpFormatter
    return parser


def walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``parser`` and every sub-command parser below it, each with the words that reach it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from walk(child, (*path, name))


def main(argv: Sequence[str] | None = None) -> int:
    import_twisted_without_tls()
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = cast(Handler, args.handler)
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
