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
        description="Run a benchmark scenario (node; bridge, large and faults need issue 6) "
        "and audit its event logs. 'txbridge bench SCENARIO --help' lists its options.",
        add_help=False,
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="SCENARIO [options]")
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
    result: int = scenarios.main(list(args.args))
    return result
