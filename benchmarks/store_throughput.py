"""Store throughput: durable adds and acknowledgements of 1 KiB messages on SQLite.

- **group commit**: adds issued in bursts of ``--burst`` per reactor turn, like a busy
  node, with up to ``--window`` operations outstanding; every add awaited. The store
  gathers what arrives while a batch commits into the next batch.
- **one at a time**: each add awaited before the next is issued (one commit per add).
- **acks**: the group-commit messages acknowledged in the same bursts.
- **raw ceiling**: plain ``sqlite3`` from Python, no Twisted, no writer thread: the same
  rows (pre-encoded messages and their queue references) in one transaction per batch of
  the mean batch size the group-commit run reached, with the same pragmas.

    .venv/bin/python -m benchmarks.store_throughput [--messages 50000] [--repeat 3]

prints the figures and writes them to benchmarks/results/store_throughput.json.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections import deque
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.python.failure import Failure

from benchmarks.runner import save
from bridge.message import Message, encode_message
from bridge.store import QueueRecord, SQLiteMessageStore
from bridge.store.schema import PAGE_SIZE

KIB = 1024
QUEUE = "bench"


def make_message(message_id: int) -> Message:
    return Message(
        id=message_id,
        address=QUEUE,
        durable=True,
        headers={"producer": "bench", "seq": message_id},
        body=b"x" * KIB,
        timestamp_ns=time.time_ns(),
    )


def rate(count: int, seconds: float) -> float:
    return round(count / seconds) if seconds > 0 else float("inf")


async def bursts(
    clock: IReactorTime,
    count: int,
    burst: int,
    window: int,
    issue: Callable[[int], Deferred[None]],
) -> float:
    """Issue ``issue(1..count)`` ``burst`` per reactor turn with at most ``window``
    outstanding, await them all; the seconds it took."""
    outstanding: deque[Deferred[list[None]]] = deque()
    start = time.perf_counter()
    for first in range(1, count + 1, burst):
        while len(outstanding) * burst >= window:
            await outstanding.popleft()
        last = min(first + burst, count + 1)
        outstanding.append(gatherResults([issue(n) for n in range(first, last)]))
        await deferLater(clock, 0, lambda: None)
    for pending in outstanding:
        await pending
    return time.perf_counter() - start


async def store_figures(
    clock: IReactorTime, directory: Path, args: argparse.Namespace
) -> dict[str, Any]:
    count, burst, window, single = args.messages, args.burst, args.window, args.single
    store = SQLiteMessageStore(directory, clock)
    await store.open()
    try:
        await store.create_queue(QueueRecord(QUEUE, QUEUE, "anycast"))
        messages = [make_message(n) for n in range(1, count + single + 1)]
        commits = store.commits
        seconds = await bursts(
            clock, count, burst, window, lambda n: store.add(messages[n - 1], [QUEUE])
        )
        add_commits = store.commits - commits
        group = {
            "adds_per_s": rate(count, seconds),
            "seconds": round(seconds, 3),
            "commits": add_commits,
            "mean_batch": round(count / add_commits, 1),
        }
        print(
            f"group commit:  {group['adds_per_s']:>9,} adds/s  "
            f"({add_commits} commits, mean batch {group['mean_batch']})",
            flush=True,
        )

        commits = store.commits
        seconds = await bursts(clock, count, burst, window, lambda n: store.acknowledge(QUEUE, n))
        acks = {
            "acks_per_s": rate(count, seconds),
            "seconds": round(seconds, 3),
            "commits": store.commits - commits,
        }
        print(f"acks:          {acks['acks_per_s']:>9,} acks/s  ({acks['commits']} commits)")

        start = time.perf_counter()
        for n in range(count + 1, count + single + 1):
            await store.add(messages[n - 1], [QUEUE])
        seconds = time.perf_counter() - start
        one = {"adds_per_s": rate(single, seconds), "messages": single}
        print(f"one at a time: {one['adds_per_s']:>9,} adds/s  (one commit each)", flush=True)
    finally:
        await store.close()
    return {"group_commit": group, "acks": acks, "one_at_a_time": one}


def raw_ceiling(directory: Path, count: int, batch: int) -> dict[str, Any]:
    """The same rows through plain sqlite3: one transaction per ``batch`` messages."""
    rows = [(n, 1, encode_message(make_message(n))) for n in range(1, count + 1)]
    directory.mkdir(parents=True)
    connection = sqlite3.connect(directory / "raw.sqlite", isolation_level=None)
    connection.execute("PRAGMA temp_store=MEMORY")
    connection.execute(f"PRAGMA page_size={PAGE_SIZE}")
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, refs INTEGER, data BLOB)")
    connection.execute(
        "CREATE TABLE message_refs (queue TEXT, message_id INTEGER, delivery_count INTEGER,"
        " PRIMARY KEY (queue, message_id)) WITHOUT ROWID"
    )
    start = time.perf_counter()
    for first in range(0, count, batch):
        chunk = rows[first : first + batch]
        connection.execute("BEGIN IMMEDIATE")
        connection.executemany("INSERT INTO messages VALUES (?, ?, ?)", chunk)
        connection.executemany(
            "INSERT INTO message_refs VALUES (?, ?, 0)", [(QUEUE, row[0]) for row in chunk]
        )
        connection.execute("COMMIT")
    seconds = time.perf_counter() - start
    connection.close()
    figures = {"adds_per_s": rate(count, seconds), "batch": batch, "seconds": round(seconds, 3)}
    print(f"raw ceiling:   {figures['adds_per_s']:>9,} adds/s  (batches of {batch})")
    return figures


def on_reactor(work: Callable[[], Coroutine[Any, Any, dict[str, Any]]]) -> dict[str, Any]:
    """Run ``work`` on the global reactor until it finishes; its result, or its error."""
    outcome: list[dict[str, Any] | Failure] = []

    def start() -> None:
        done = Deferred.fromCoroutine(work())
        done.addBoth(outcome.append).addBoth(lambda _: reactor.stop())

    reactor.callWhenRunning(start)
    reactor.run()
    if isinstance(outcome[0], Failure):
        outcome[0].raiseException()
    return outcome[0]


def median_run(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run whose ``key`` is the median."""
    return sorted(runs, key=lambda run: float(run[key]))[len(runs) // 2]


def run(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    clock = IReactorTime(reactor)

    async def repeat() -> dict[str, Any]:
        runs = []
        for index in range(args.repeat):
            runs.append(await store_figures(clock, directory / f"store-{index}", args))
        return {
            case: median_run([run[case] for run in runs], key)
            for case, key in (
                ("group_commit", "adds_per_s"),
                ("acks", "acks_per_s"),
                ("one_at_a_time", "adds_per_s"),
            )
        }

    figures = on_reactor(repeat)
    batch = max(1, round(figures["group_commit"]["mean_batch"]))
    raw = [
        raw_ceiling(directory / f"raw-{index}", args.messages, batch)
        for index in range(args.repeat)
    ]
    figures["raw_ceiling"] = median_run(raw, "adds_per_s")
    ratio = figures["group_commit"]["adds_per_s"] / figures["raw_ceiling"]["adds_per_s"]
    figures["group_commit_vs_raw"] = round(ratio, 2)
    print(
        f"median of {args.repeat}: group commit {figures['group_commit']['adds_per_s']:,} adds/s, "
        f"acks {figures['acks']['acks_per_s']:,}/s, "
        f"one at a time {figures['one_at_a_time']['adds_per_s']:,} adds/s, "
        f"raw {figures['raw_ceiling']['adds_per_s']:,} adds/s, group commit / raw {ratio:.2f}"
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.store_throughput")
    parser.add_argument("--messages", type=int, default=50_000, help="adds (and acks)")
    parser.add_argument("--burst", type=int, default=500, help="adds issued per turn")
    parser.add_argument("--window", type=int, default=10_000, help="most adds outstanding")
    parser.add_argument("--single", type=int, default=2_000, help="one-at-a-time adds")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (median kept)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="store-bench-") as directory:
        figures = run(args, Path(directory))
    settings = {
        "messages": args.messages,
        "body_bytes": KIB,
        "burst": args.burst,
        "window": args.window,
        "single": args.single,
        "repeat": args.repeat,
    }
    path = save("store_throughput", {**settings, **figures})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
