"""Benchmark scenarios: real node processes, traced producers and consumers writing event
logs into the run folder, then the audit of that folder.

    txbridge bench SCENARIO [--out DIR] [--messages N] [--size BYTES]
    python -m benchmarks run SCENARIO [...]

Each scenario is an entry of ``SCENARIOS``: a module and its function ``(argv) -> int``,
or the reason it cannot run yet.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    summary: str
    module: str | None = None
    function: str = "main"
    needs: str | None = None
    """Why it cannot run yet, for a scenario whose parts are not built."""


SCENARIOS = {
    "node": Scenario("one node: a producer and a consumer through it", "benchmarks.scenarios.node"),
    "bridge": Scenario(
        "node A -> core bridge -> node B: producers on A, consumers on B",
        "benchmarks.scenarios.bridged",
        "bridge_main",
    ),
    "large": Scenario(
        "large messages through a bridge to a slow consumer",
        "benchmarks.scenarios.bridged",
        "large_main",
    ),
    "faults": Scenario(
        "the bridge scenario with kill -9 of a node and dropped connections on a schedule",
        "benchmarks.scenarios.bridged",
        "faults_main",
    ),
}


def usage() -> str:
    lines = ["usage: txbridge bench SCENARIO [options]  (SCENARIO --help for its options)", ""]
    for name, scenario in SCENARIOS.items():
        later = f"  [not yet: needs {scenario.needs}]" if scenario.needs else ""
        lines.append(f"  {name:8} {scenario.summary}{later}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in SCENARIOS:
        print(usage(), file=sys.stderr)
        return 2
    scenario = SCENARIOS[argv[0]]
    if scenario.module is None:
        print(f"the {argv[0]} scenario needs {scenario.needs}, not built yet", file=sys.stderr)
        return 2
    module = importlib.import_module(scenario.module)
    result: int = getattr(module, scenario.function)(argv[1:])
    return result
