"""``python -m benchmarks failover``: seconds from kill -9 of the live node to the first
confirmed send on its backup.

Two nodes with ``[ha]`` share one PostgreSQL schema (a new schema per run, dropped
afterwards) and one core port: the backup binds it when it becomes live, so one client
URL reaches whichever node is live. Per kill, at a random point of the live node's
renewal period once the backup waits: the live node is killed with SIGKILL; a probe
tries the port every ``RETRY`` seconds and, once a node listens, a blocking client
connects, sends one durable message and waits for its confirmation; the seconds from
the kill to that confirmation are the figure. The killed node is started again as the
backup (it waits for the lease), so the pair alternates. This runs for each
``lease-reap-time`` asked (2 s and 10 s by default) with ``lease-ping-time`` a quarter
of it and ``lease-query-timeout`` half the ping; percentiles over ``--kills`` kills per
reap time.

The goal is p99 at most reap + ping: the lease expires reap after the killed node's last
renewal (which began at most one ping before the kill), and the backup tries every ping.

Then, in the same run, what the shared database costs in throughput: durable 1 KiB
messages through one node on SQLite and on the PostgreSQL server, alternating
(``--throughput-repeat`` runs of ``--throughput-count`` messages each, SQLite first;
``benchmarks.node_throughput`` runs each), with the server's CPU and WAL per message. The
goal is PostgreSQL at 10,000 msgs/s or more. Prints tables and writes
benchmarks/results/failover.json.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import socket
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.node_throughput import BIN, BenchmarkError, Child, Clients, children, one_run
from benchmarks.pg_store import DEFAULT_SERVER, bench_store
from benchmarks.runner import free_port, save
from bridge.client import blocking
from bridge.client.errors import ClientError

QUEUE = "failover"
RETRY = 0.01
"""The wait between probes of the port: the figure includes up to this much."""
START = 60.0
"""Bound on a node's start (process, imports, the lease's first query)."""


def node_config(name: str, port: int, store: str, reap: float) -> str:
    ping = reap / 4
    policy = "shared-store-primary" if name == "a" else "shared-store-backup"
    return f"""\
[node]
name = "{name}"
data-dir = "data"

[[acceptor]]
name = "core"
url = "tcp://127.0.0.1:{port}"
protocols = ["core"]

[management]
url = "http://127.0.0.1:0"

[[address]]
name = "{QUEUE}"
routing = "anycast"

[security]
enabled = false
{store}
[ha]
policy = "{policy}"
lease-ping-time = "{round(ping * 1000)}ms"
lease-reap-time = "{round(reap * 1000)}ms"
lease-query-timeout = "{round(ping * 500)}ms"
"""


def start(name: str, config: str, root: Path, stack: ExitStack) -> Child:
    directory = root / name
    directory.mkdir(exist_ok=True)
    (directory / "node.toml").write_text(config)
    node = Child(
        f"node {name}",
        [str(BIN / "txbridge"), "node", "--config", "node.toml"],
        directory,
        directory / "node.stderr",
    )
    stack.callback(node.stop)
    return node


def listening(port: int) -> bool:
    """Whether a TCP connection to ``port`` is accepted (refused at once when nobody
    listens; the client's own failed attempt takes longer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def first_confirmed_send(port: int, deadline: float, address: str = QUEUE) -> float:
    """Once a node listens on ``port`` (tried every ``RETRY`` s), connect and send one
    durable message to ``address``; the monotonic time its confirmation came back. Fails
    at ``deadline``."""
    url = f"tcp://127.0.0.1:{port}"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BenchmarkError(f"no confirmed send on {url} in time")
        if not listening(port):
            time.sleep(RETRY)
            continue
        try:
            with blocking.connect(url, timeout=min(left, 10.0)) as client:
                client.send(address, b"after the kill", durable=True)
                return time.monotonic()
        except (ClientError, OSError):
            time.sleep(RETRY)


def kills_for(reap: float, kills: int, server: str, root: Path) -> list[float]:
    """``kills`` kill -9s of the live node at this reap time: the seconds of each."""
    ping = reap / 4
    port = free_port()
    seconds: list[float] = []
    with children() as stack, bench_store(server) as (store, _costs):
        configs = {name: node_config(name, port, store, reap) for name in ("a", "b")}
        live = start("a", configs["a"], root, stack)
        live.until(r"node a: LIVE, epoch 1", time.monotonic() + START)
        backup = start("b", configs["b"], root, stack)
        backup.until(r"node b: live is a", time.monotonic() + START)
        phases = random.Random(kills)
        for kill in range(kills):
            # The restarts take about the same time each, so the kill would come at the
            # same point of the live node's renewal period every time: a random wait of
            # up to one ping puts it anywhere in that period.
            time.sleep(phases.uniform(0.0, ping))
            live_name = "a" if kill % 2 == 0 else "b"
            backup_name = "b" if live_name == "a" else "a"
            killed = time.monotonic()
            live.stop(signal.SIGKILL)
            confirmed = first_confirmed_send(port, killed + reap + ping + START)
            seconds.append(confirmed - killed)
            print(f"  reap {reap:g}s kill {kill + 1}/{kills}: {seconds[-1]:.3f}s", flush=True)
            backup.until(rf"node {backup_name}: LIVE", time.monotonic() + START)
            live, backup = backup, start(live_name, configs[live_name], root, stack)
            backup.until(rf"node {live_name}: live is {backup_name}", time.monotonic() + START)
    return seconds


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def rank(p: float) -> float:
        # nearest rank: the smallest value with at least p of the values at or below it
        return ordered[max(0, math.ceil(len(ordered) * p / 100) - 1)]

    return {
        "p50": statistics.median(ordered),
        "p90": rank(90),
        "p99": rank(99),
        "max": ordered[-1],
        "min": ordered[0],
    }


STORE_GOAL = 10_000
"""Durable msgs/s the node should reach on PostgreSQL (ActiveMQ on KahaDB here: 11,500)."""


def store_throughput(count: int, repeat: int, server: str) -> dict[str, Any]:
    """Durable msgs/s on SQLite and on PostgreSQL, runs alternating: medians, the ratio,
    and the database's cost per message."""
    runs: dict[str, list[dict[str, Any]]] = {"sqlite": [], "postgresql": []}
    for round_ in range(repeat):
        for store, done in runs.items():
            on = server if store == "postgresql" else None
            figures = one_run(True, count, 120.0, Clients(), None, postgresql=on)
            done.append(figures)
            print(
                f"durable on {store:10} run {round_ + 1}/{repeat}: "
                f"{figures['msgs_per_s']:>8,.0f} msgs/s",
                flush=True,
            )
    rates = {
        store: statistics.median(r["msgs_per_s"] for r in done) for store, done in runs.items()
    }
    database = {
        key: statistics.median(r["database"][key] for r in runs["postgresql"])
        for key in ("server_cpu_us_per_msg", "wal_bytes_per_msg")
    }
    return {
        "count": count,
        "repeat": repeat,
        "msgs_per_s": rates,
        "ratio_postgresql_to_sqlite": rates["postgresql"] / rates["sqlite"],
        "goal_postgresql_msgs_per_s": STORE_GOAL,
        "database_per_msg": database,
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks failover")
    parser.add_argument("--kills", type=int, default=20, help="kill -9s per reap time (20)")
    parser.add_argument(
        "--reap",
        type=float,
        action="append",
        help="lease-reap-time in seconds; repeat for several (default: 2 and 10)",
    )
    parser.add_argument(
        "--postgresql", default=DEFAULT_SERVER, help=f"server URL (default {DEFAULT_SERVER})"
    )
    parser.add_argument(
        "--throughput-count",
        type=int,
        default=20_000,
        help="durable messages per store run (20000; 0: no store runs)",
    )
    parser.add_argument(
        "--throughput-repeat", type=int, default=3, help="runs per store, alternating (3)"
    )
    parser.add_argument(
        "--output", type=Path, help="write the JSON here, not to benchmarks/results/"
    )
    args = parser.parse_args(argv)
    if args.kills < 1:
        parser.error("--kills must be positive")
    if args.throughput_count < 0 or args.throughput_repeat < 1:
        parser.error("--throughput-count must not be negative, --throughput-repeat positive")
    reaps = args.reap or [2.0, 10.0]
    if any(reap <= 0 for reap in reaps):
        parser.error("--reap must be positive")
    cases: list[dict[str, Any]] = []
    print(f"{'reap':>6} {'ping':>6} {'goal':>6} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7}")
    try:
        for reap in reaps:
            with tempfile.TemporaryDirectory(prefix="txbridge-failover-") as root:
                seconds = kills_for(reap, args.kills, args.postgresql, Path(root))
            ping = reap / 4
            figures = percentiles(seconds)
            cases.append(
                {
                    "reap_s": reap,
                    "ping_s": ping,
                    "query_timeout_s": ping / 2,
                    "goal_s": reap + ping,
                    "kills": args.kills,
                    "seconds": seconds,
                    **figures,
                }
            )
            print(
                f"{reap:>5g}s {ping:>5g}s {reap + ping:>5g}s "
                + " ".join(f"{figures[key]:>6.2f}s" for key in ("p50", "p90", "p99", "max"))
            )
        throughput = None
        if args.throughput_count:
            throughput = store_throughput(
                args.throughput_count, args.throughput_repeat, args.postgresql
            )
            rates, cost = throughput["msgs_per_s"], throughput["database_per_msg"]
            print(
                f"durable msgs/s, medians: SQLite {rates['sqlite']:,.0f}, PostgreSQL "
                f"{rates['postgresql']:,.0f} (goal {STORE_GOAL:,}; "
                f"{throughput['ratio_postgresql_to_sqlite']:.2f} of SQLite); the server spent "
                f"{cost['server_cpu_us_per_msg']:.1f} µs CPU and "
                f"{cost['wal_bytes_per_msg']:,.0f} B of WAL per message"
            )
    except BenchmarkError as error:
        print(f"failover benchmark failed: {error}", file=sys.stderr)
        return 1
    load = os.getloadavg()
    path = save(
        "failover",
        {
            "retry_interval_s": RETRY,
            "load_average": list(load),
            "cases": cases,
            "store_throughput": throughput,
        },
        args.output,
    )
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"saved {path}")
    return 0
