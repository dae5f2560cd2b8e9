"""``python -m benchmarks activation``: how long a node's reactor stalls while it loads a
large store, the work of an HA activation (docs/ha.md, "Timings").

An SQLite store is filled with ``--messages`` durable messages of ``--body`` bytes on one
queue, written by the store's own writer in large batches (seconds, not a producer run).
A broker then opens it on the reactor while a probe, a ``LoopingCall`` every
``--probe-ms``, records how late each of its calls ran: the longest lateness is the
longest time the reactor answered nothing (no ping, no status, no lease answer). Printed
as one JSON line: the open's seconds, the probe's longest and 99th-percentile stall, and
the full garbage collections during the open (each holds every thread, the lease's too).
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall, react
from twisted.internet.threads import deferToThread

from bridge.config.node import parse_node_config
from bridge.message import Message, encode_message
from bridge.node.broker import Broker
from bridge.store.operations import AddMessage, CreateQueue
from bridge.store.records import QueueRecord
from bridge.store.sqlite import FILENAME, SQLiteMessageStore
from bridge.store.writer import Writer

QUEUE = "orders"
BATCH = 20_000


def fill(store_dir: Path, count: int, body: int = 100, queue: str = QUEUE) -> None:
    """An SQLite store in ``store_dir`` holding ``count`` durable messages of ``body``
    bytes on the anycast queue ``queue``, as a node would have written them. Blocking."""
    store_dir.mkdir(parents=True, exist_ok=True)
    writer = Writer(store_dir / FILENAME, 5.0)
    writer.open()
    try:
        writer.run([CreateQueue(QueueRecord(queue, queue, "anycast"))])
        payload = b"x" * body
        for first in range(1, count + 1, BATCH):
            last = min(first + BATCH, count + 1)
            writer.run(
                [
                    AddMessage(i, (queue,), encode_message(Message(i, queue, True, {}, payload)))
                    for i in range(first, last)
                ]
            )
    finally:
        writer.close()


class Probe:
    """Records how late each call of a ``LoopingCall`` every ``interval`` ran, and how
    long each full garbage collection held the interpreter (every thread waits for it)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.stalls: list[float] = []
        self.collections: list[float] = []
        self._collecting = 0.0
        self._last = time.monotonic()
        self._loop = LoopingCall(self._tick)

    def start(self) -> None:
        self._last = time.monotonic()
        gc.callbacks.append(self._collected)
        self._loop.start(self.interval, now=False)

    def stop(self) -> None:
        self._loop.stop()
        gc.callbacks.remove(self._collected)

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._collecting = time.monotonic()
        else:
            self.collections.append(time.monotonic() - self._collecting)

    def _tick(self) -> None:
        now = time.monotonic()
        self.stalls.append(max(0.0, now - self._last - self.interval))
        self._last = now

    def longest(self) -> float:
        return max(self.stalls, default=0.0)

    def p99(self) -> float:
        ordered = sorted(self.stalls)
        return ordered[int(len(ordered) * 0.99)] if ordered else 0.0


async def measure(store_dir: Path, probe_interval: float) -> dict[str, float]:
    """Open a broker on ``store_dir`` under the probe."""
    config = parse_node_config(
        {"node": {"name": "probe", "data-dir": str(store_dir)}}, store_dir / "node.toml"
    )
    broker = Broker(config, SQLiteMessageStore(config.store_dir, reactor))
    probe = Probe(probe_interval)
    probe.start()
    started = time.monotonic()
    await broker.open()
    opened = time.monotonic() - started
    probe.stop()
    await broker.close()
    return {
        "open_s": round(opened, 3),
        "longest_stall_s": round(probe.longest(), 3),
        "p99_stall_s": round(probe.p99(), 3),
        "probe_calls": len(probe.stalls),
        "full_gcs": len(probe.collections),
        "longest_full_gc_s": round(max(probe.collections, default=0.0), 3),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks activation")
    parser.add_argument("--messages", type=int, default=750_000)
    parser.add_argument("--body", type=int, default=1024, help="bytes per message")
    parser.add_argument("--probe-ms", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    async def run() -> None:
        folder = Path(tempfile.mkdtemp(prefix="txbridge-activation-"))
        try:
            began = time.monotonic()
            await deferToThread(fill, folder / "store", args.messages, args.body)
            filled = time.monotonic() - began
            interval = args.probe_ms / 1000
            runs = [await measure(folder / "store", interval) for _ in range(args.repeat)]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        report = {"messages": args.messages, "body": args.body, "fill_s": round(filled, 1)}
        print(json.dumps({**report, "runs": runs}), flush=True)

    react(lambda _: Deferred.fromCoroutine(run()))  # ends the process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
