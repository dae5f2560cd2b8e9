"""``python -m benchmarks client-failover``: seconds from kill -9 of a cluster member to
the first delivery on the member that took its store over, for the killed member's
clients, and what became of the messages in flight at the kill.

Three members on two hosts (by host id), as tests/system/test_ha_cluster_clients.py runs
them: a (h1) live on a shared SQLite store directory, c (h2) its backup there
(``[cluster] store = "a"``), b (h2) on a store of its own; a's first failover node is b.
A traced producer (durable sends with duplicate ids, at most ``--lead`` ahead of the
consumer) and a traced consumer (acknowledging each message) are given a's URL only and
follow the map (``reconnect-attempts`` 2 at 0.1 s, then b, which redirects them to c).
After ``--kill-after`` confirmed sends, a is killed with SIGKILL. Per run:

- ``kill_to_live_s``: from the kill to c's "LIVE" line (the lock and the store's load);
- ``live_to_first_delivery_s``: from that line to the consumer's first delivery from c
  (the goal: at most 2 s);
- ``in_flight``: sends made and not yet settled at the kill; and from the audit
  (``python -m bridge.audit``, local[2]) of the run's event logs: lost, unexpected, and
  repeats, with the consumer's count of repeats not flagged as redeliveries (goal: 0 lost,
  0 unflagged).

Each run starts three fresh members in a new directory; ``--runs`` runs (5). Prints a
table and writes benchmarks/results/client_failover.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from twisted.internet import task
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from benchmarks.failover import start
from benchmarks.node_throughput import BenchmarkError, Child, children
from benchmarks.runner import ROOT, free_port, save
from bridge import events
from bridge.client.api import Client, ReceivedMessage, connect
from bridge.client.errors import ClientError
from transport.reconnect import ReconnectPolicy

QUEUE = "orders"
START = 60.0
"""Bound on a member's start, its takeover, and the run's end."""
FOLLOW = ReconnectPolicy(0.1, 1.0, 0.1, reconnect_attempts=2)
"""Two retries at the node, 0.1 s apart, then its failover nodes."""
HOSTS = {"a": "h1", "b": "h2", "c": "h2"}
GOAL = 2.0


def member_config(name: str, ports: dict[str, int], shared: Path) -> str:
    """Member ``name``'s file: a and c with ``[ha]`` on ``shared``, b on its own."""
    members = ", ".join(f'"tcp://127.0.0.1:{ports[each]}"' for each in sorted(ports))
    store = f'[store]\ntype = "sqlite"\ndata-dir = "{shared}"\n' if name != "b" else ""
    policy = "shared-store-primary" if name == "a" else "shared-store-backup"
    ha = (
        f'[ha]\npolicy = "{policy}"\nlease-ping-time = "500ms"\n'
        'lease-reap-time = "2000ms"\nlease-query-timeout = "250ms"\n'
        if name != "b"
        else ""
    )
    return f"""\
[node]
name = "{name}"
data-dir = "data"

[[acceptor]]
name = "core"
url = "tcp://127.0.0.1:{ports[name]}"
protocols = ["core"]

[management]
url = "http://127.0.0.1:0"

[[address]]
name = "{QUEUE}"
routing = "anycast"

[security]
enabled = false

{store}{ha}
[cluster]
name = "bench"
user = "cluster"
members = [{members}]
host-id = "{HOSTS[name]}"
store = "{"a" if name == "c" else name}"
retry-interval = "100ms"
"""


def audit(run_dir: Path) -> dict[str, Any]:
    """The audit's delivery figures of one run's event logs."""
    result = subprocess.run(
        [sys.executable, "-m", "bridge.audit", str(run_dir), "--master", "local[2]"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if result.returncode != 0:
        raise BenchmarkError(f"the audit failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    report: dict[str, Any] = json.loads((run_dir / "report" / "report.json").read_text())
    return report["delivery"]  # type: ignore[no-any-return]


async def _until(reactor: Any, condition: Any, what: str, timeout: float = START) -> None:
    """Wait (bounded, polling every 5 ms) until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{what}: not in {timeout:g} s")
        await deferLater(reactor, 0.005, lambda: None)


async def _produce(
    reactor: Any,
    client: Client,
    *,
    settled: list[ClientError | None],
    received: list[tuple[int, bool]],
    count: int,
    lead: int,
) -> None:
    for seq in range(count):
        while seq - len(received) > lead:
            await deferLater(reactor, 0.005, lambda: None)
        if not client.is_writable:
            await client.when_writable()
        client.send_nowait(
            QUEUE,
            b"%d" % seq,
            {events.TRACE_PRODUCER: "producer", events.TRACE_SEQ: seq},
            duplicate_id=b"seq-%d" % seq,
            on_settled=settled.append,
        )


async def one_run(reactor: Any, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Three fresh members, one kill -9 of a under load: the run's figures."""
    ports = {name: free_port() for name in "abc"}
    shared = root / "store-a"
    with children() as stack:
        nodes: dict[str, Child] = {}
        for name, ready in (("a", r"node a: LIVE"), ("c", r"node c: live is a"), ("b", "started")):
            nodes[name] = start(name, member_config(name, ports, shared), root, stack)
            await deferToThread(nodes[name].until, ready, time.monotonic() + START)
        await deferToThread(
            nodes["a"].until, r"node a: cluster view a .*, b ", time.monotonic() + START
        )
        run_dir = root / "run"
        writers = [events.EventWriter(run_dir, "bench", n) for n in ("producer", "consumer")]
        received: list[tuple[int, bool]] = []
        first_on_c: list[float] = []
        settled: list[ClientError | None] = []
        url = f"tcp://127.0.0.1:{ports['a']}"
        reader = writer = None
        try:
            reader = await connect(reactor, url, reconnect=FOLLOW, trace=writers[1])

            def on_message(message: ReceivedMessage) -> None:
                if not first_on_c and reader is not None and reader.node_name == "c":
                    first_on_c.append(time.monotonic())
                received.append((int(message.headers[events.TRACE_SEQ]), message.redelivered))
                message.ack()

            await reader.consumer(QUEUE, on_message=on_message)
            writer = await connect(reactor, url, reconnect=FOLLOW, trace=writers[0])
            producing = Deferred.fromCoroutine(
                _produce(
                    reactor,
                    writer,
                    settled=settled,
                    received=received,
                    count=args.count,
                    lead=args.lead,
                )
            )
            await _until(reactor, lambda: len(settled) >= args.kill_after, "sends before the kill")
            in_flight = writer.unconfirmed
            live = deferToThread(nodes["c"].until, r"node c: LIVE", time.monotonic() + START)
            killed = time.monotonic()
            nodes["a"].stop(signal.SIGKILL)
            await live
            live_at = time.monotonic()
            await producing
            await _until(reactor, lambda: len(settled) == args.count, "every send settled")
            await _until(
                reactor,
                lambda: len({seq for seq, _ in received}) == args.count,
                "every message received",
            )
            await _until(reactor, lambda: bool(first_on_c), "a delivery from c")
        finally:
            for client in (writer, reader):
                if client is not None:
                    await client.close()
            for each in writers:
                await deferToThread(each.close)
    seen: set[int] = set()
    unflagged = 0
    for seq, redelivered in received:
        if seq in seen and not redelivered:
            unflagged += 1
        seen.add(seq)
    delivery = await deferToThread(audit, run_dir)
    return {
        "kill_to_live_s": live_at - killed,
        "live_to_first_delivery_s": first_on_c[0] - live_at,
        "kill_to_first_delivery_s": first_on_c[0] - killed,
        "in_flight": in_flight,
        "send_errors": sum(error is not None for error in settled),
        "confirmed": delivery["confirmed"],
        "lost": delivery["lost"],
        "unexpected": delivery["unexpected"],
        "repeats": delivery["duplicate_deliveries"],
        "unflagged_repeats": unflagged,
    }


def summary(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [run[key] for run in runs]
    return {"median": statistics.median(values), "max": max(values), "min": min(values)}


async def _main(reactor: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    print(
        f"{'run':>4} {'kill->live':>11} {'live->1st':>10} {'in flight':>10} {'lost':>5} "
        f"{'repeats':>8} {'unflagged':>10}"
    )
    for number in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="txbridge-client-failover-") as root:
            run = await one_run(reactor, Path(root), args)
        runs.append(run)
        print(
            f"{number:>4} {run['kill_to_live_s']:>10.2f}s {run['live_to_first_delivery_s']:>9.2f}s "
            f"{run['in_flight']:>10} {run['lost']:>5} {run['repeats']:>8} "
            f"{run['unflagged_repeats']:>10}",
            flush=True,
        )
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks client-failover")
    parser.add_argument("--runs", type=int, default=5, help="kill -9s, each on fresh members (5)")
    parser.add_argument("--count", type=int, default=3000, help="durable sends per run (3000)")
    parser.add_argument(
        "--kill-after", type=int, default=1000, help="confirmed sends before the kill (1000)"
    )
    parser.add_argument(
        "--lead", type=int, default=200, help="most sends ahead of the consumer (200)"
    )
    parser.add_argument(
        "--output", type=Path, help="write the JSON here, not to benchmarks/results/"
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or not 0 < args.kill_after < args.count or args.lead < 1:
        parser.error("--runs and --lead must be positive, --kill-after below --count")
    outcome: list[Any] = []

    async def run(reactor: Any) -> None:
        outcome.append(await _main(reactor, args))

    try:
        task.react(lambda reactor: Deferred.fromCoroutine(run(reactor)))
    except SystemExit as ended:
        if ended.code:
            return int(ended.code)
    except BenchmarkError as error:
        print(f"client-failover benchmark failed: {error}", file=sys.stderr)
        return 1
    if not outcome:
        return 1
    runs = outcome[0]
    figures = {
        key: summary(runs, key)
        for key in ("kill_to_live_s", "live_to_first_delivery_s", "kill_to_first_delivery_s")
    }
    load = os.getloadavg()
    path = save(
        "client_failover",
        {
            "goal_live_to_first_delivery_s": GOAL,
            "load_average": list(load),
            "runs": runs,
            **figures,
        },
        args.output,
    )
    first = figures["live_to_first_delivery_s"]
    print(
        f"live -> first delivery on c: median {first['median']:.2f} s, max {first['max']:.2f} s "
        f"(goal {GOAL:g} s); lost {sum(r['lost'] for r in runs)}, unflagged repeats "
        f"{sum(r['unflagged_repeats'] for r in runs)}"
    )
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"saved {path}")
    return 0
