"""``python -m benchmarks SCENARIO``: the demo and the benchmark runs."""

from __future__ import annotations

import importlib
import sys

SCENARIOS = {
    "demo": "benchmarks.demo",
    "transport": "benchmarks.transport_throughput",
    "store": "benchmarks.store_throughput",
    "store-writer": "benchmarks.store_writer",
    "security": "benchmarks.security_checks",
    "node": "benchmarks.node_throughput",
    "large": "benchmarks.node_large",
    "body-send": "benchmarks.body_send",
    "audit-scale": "benchmarks.audit_scale",
    "stomp": "benchmarks.stomp_throughput",
    "stomp-calls": "benchmarks.stomp_calls",
    "bridge": "benchmarks.bridge_throughput",
    "hostile": "benchmarks.hostile",
    "peers-stomp": "benchmarks.peers_stomp",
    "failover": "benchmarks.failover",
    "lease-latency": "benchmarks.lease_latency",
    "pg-runs": "benchmarks.pg_runs",
    "replication": "benchmarks.replication",
    "client-failover": "benchmarks.client_failover",
    "activation": "benchmarks.activation",
}


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "run":
        from benchmarks.scenarios import main as run_scenario  # noqa: PLC0415

        return run_scenario(sys.argv[2:])
    if len(sys.argv) < 2 or sys.argv[1] not in SCENARIOS:
        print(
            f"usage: python -m benchmarks {{{','.join(SCENARIOS)}}} [options]\n"
            "       python -m benchmarks run SCENARIO [options]   (= txbridge bench)",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(SCENARIOS[sys.argv[1]])
    result: int = module.main(sys.argv[2:])
    return result


if __name__ == "__main__":
    sys.exit(main())
