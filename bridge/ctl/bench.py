"""``txbridge bench SCENARIO [options]``: a benchmark scenario run and its audit.

The scenarios live in the source tree's ``benchmarks`` package (they start node processes
from a checkout), so this command runs from a checkout: ``benchmarks.scenarios`` is found
at run time, and an install without it says so.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="run a benchmark scenario and audit its event logs",
        description="Run a benchmark scenario (node processes, traced producers and "
        "consumers) and audit its event logs. Without SCENARIO, lists the scenarios; "
        "'txbridge bench SCENARIO --help' lists a scenario's options. Runs from a source "
        "checkout.",
        epilog="example:\n"
        "  txbridge bench node --out /tmp/bench-node --messages 20000\n"
        "  txbridge bench node --help",
    )
    parser.add_argument(
        "scenario", nargs="?", metavar="SCENARIO", help="node, bridge, large or faults"
    )
    parser.add_argument(
        "options",
        nargs=argparse.REMAINDER,
        metavar="...",
        help="the scenario's options (passed on to it)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        scenarios = importlib.import_module("benchmarks.scenarios")
    except ImportError:
        print(
            "txbridge bench: the benchmarks package is not here; run it from a source "
            "checkout (make test sets one up)",
            file=sys.stderr,
        )
        return 2
    argv = [args.scenario, *args.options] if args.scenario is not None else []
    result: int = scenarios.main(argv)
    return result
