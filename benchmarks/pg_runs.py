"""Operations the node gives the PostgreSQL store one per message, many per turn.

A consumer that acknowledges each message alone gives the store one all-or-nothing
acknowledgement per message (``acknowledge_many`` of one id), an address paging under
load one ``page`` per message, and a consumer closed with messages in flight one delivery
count per message. The writer takes what arrives while a batch commits as the
next batch; what a run of such operations costs per batch (one statement, or one round
trip each) decides the rate.

- **pages**: ``--messages`` non-durable 1 KiB messages paged, ``--burst`` per reactor
  turn, every one awaited;
- **acks**: as many durable messages added (not measured), then acknowledged one id per
  operation, ``--burst`` per turn;
- **counts**: as many durable messages added (not measured), then each one's delivery
  count set, ``--burst`` per turn.

Each run on a new schema of ``--postgresql`` (dropped after)::

    .venv/bin/python -m benchmarks pg-runs [--messages 20000] [--repeat 3]

prints the figures (operations/s, medians) and writes them to
benchmarks/results/pg_runs.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import ensureDeferred
from twisted.internet.interfaces import IReactorTime

from benchmarks.pg_store import DEFAULT_SERVER, bench_schema
from benchmarks.runner import save
from benchmarks.store_throughput import bursts
from bridge.message import Message
from bridge.store import MessageStore, QueueRecord
from bridge.store.postgresql import PostgreSQLMessageStore

QUEUE = "bench"
CASES = ("pages", "acks", "counts")


def _message(message_id: int, durable: bool) -> Message:
    return Message(message_id, QUEUE, durable, {"seq": message_id}, b"x" * 1024)


async def _case(server: str, case: str, count: int, burst: int) -> float:
    """One run of ``case``, on a schema of its own: operations per second."""
    with bench_schema(server) as (_, url), tempfile.TemporaryDirectory() as folder:
        store: MessageStore = PostgreSQLMessageStore(url, Path(folder), reactor)
        await store.open()
        try:
            clock: IReactorTime = reactor
            if case == "pages":
                seconds = await bursts(
                    clock, count, burst, count, lambda i: store.page(_message(i, False), [QUEUE])
                )
            else:
                await store.create_queue(QueueRecord(QUEUE, QUEUE, "anycast"))
                await bursts(
                    clock, count, burst, count, lambda i: store.add(_message(i, True), [QUEUE])
                )
                seconds = await bursts(
                    clock,
                    count,
                    burst,
                    count,
                    (lambda i: store.acknowledge_many(QUEUE, [i]))
                    if case == "acks"
                    else (lambda i: store.update_delivery_count(QUEUE, i, 1)),
                )
        finally:
            await store.close()
    return round(count / seconds)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {"messages": args.messages, "burst": args.burst, "cases": {}}
    for case in CASES:
        rates = [
            await _case(args.postgresql, case, args.messages, args.burst)
            for _ in range(args.repeat)
        ]
        figures["cases"][case] = {"per_second": statistics.median(rates), "runs": rates}
        print(f"{case:6} {statistics.median(rates):>9,.0f} operations/s  (runs: {rates})")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks pg-runs", description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000, help="operations per run")
    parser.add_argument("--burst", type=int, default=100, help="operations issued per turn")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (median kept)")
    parser.add_argument("--postgresql", default=DEFAULT_SERVER, help="server URL")
    parser.add_argument("--output", type=Path, help="write the JSON here")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {}

    def start() -> None:
        done = ensureDeferred(_run(args))
        done.addCallback(result.update)
        done.addErrback(lambda failure: result.update(error=failure.getTraceback()))
        done.addBoth(lambda _: reactor.stop())

    reactor.callWhenRunning(start)
    reactor.run()
    if "error" in result:
        print(result["error"])
        return 1
    print(f"saved {save('pg_runs', result, args.output)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
