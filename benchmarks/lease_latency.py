"""The lease's calls against a database far away: each call's time through a proxy that
holds every piece of data for half of ``--rtt`` in each direction, so that what a call
costs is counted in round trips.

A live node renews its lease every ``lease-ping-time`` and each renewal must land within
``lease-query-timeout`` (500 ms by default): a renewal of four round trips fails on a
database 125 ms away, one of a single round trip only at 500 ms. This measures acquire,
renew and the list of waiting backups (which a live node reads after each renewal) on a
schema of its own, ``--repeat`` times each, on an open connection.

    python -m benchmarks lease-latency [--rtt 40ms] [--repeat 15] [--postgresql URL]
                                       [--output FILE]

prints each call's median milliseconds and round trips (the median over the RTT, rounded
down: the statements' own time is what is left); saves
benchmarks/results/lease_latency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from benchmarks.pg_store import DEFAULT_SERVER, bench_schema
from benchmarks.runner import save
from bridge.ha.lease import LeaseTable
from bridge.ha.lock import Holder
from security.durations import parse_duration

QUERY_TIMEOUT = 10.0
"""Far above any RTT measured: no call is cut short."""
REAP = 60.0


async def _carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Pass what ``reader`` gets to ``writer``, each piece ``delay`` seconds later, in order."""
    pieces: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        while data := await reader.read(65536):
            await pieces.put((time.monotonic() + delay, data))
        await pieces.put((time.monotonic() + delay, b""))

    async def write() -> None:
        while True:
            due, data = await pieces.get()
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    await asyncio.gather(read(), write())


class DelayProxy:
    """A TCP proxy to ``host``:``port`` on a thread of its own, ``rtt`` / 2 each way."""

    def __init__(self, host: str, port: int, rtt: float) -> None:
        self._target = (host, port)
        self._delay = rtt / 2
        self._ready = threading.Event()
        self.port = 0
        threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True).start()
        if not self._ready.wait(10):
            raise RuntimeError("the delaying proxy did not start")

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._connected, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await server.serve_forever()

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream, downstream = await asyncio.open_connection(*self._target)
        await asyncio.gather(
            _carry(reader, downstream, self._delay),
            _carry(upstream, writer, self._delay),
            return_exceptions=True,
        )


def _timed(call: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.monotonic()
        call()
        times.append(time.monotonic() - started)
    return times


def run(server: str, rtt: float, repeat: int) -> dict[str, Any]:
    """Each call ``repeat`` times through the proxy; seconds per call, and medians."""
    parts = urlsplit(server)
    proxy = DelayProxy(parts.hostname or "127.0.0.1", parts.port or 5432, rtt)
    with bench_schema(server) as (_, url):
        target = urlsplit(url)
        user = target.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{proxy.port}" if user else f"127.0.0.1:{proxy.port}"
        proxied = urlunsplit(target._replace(netloc=netloc))
        table = LeaseTable(proxied, QUERY_TIMEOUT)
        try:
            me = Holder("bench")
            taken = table.acquire(me, REAP)  # connects and makes the table first
            assert taken is not None
            epoch = taken.epoch

            def acquire() -> None:
                nonlocal epoch
                row = table.acquire(me, REAP)
                assert row is not None
                epoch = row.epoch

            runs = {
                "acquire": _timed(acquire, repeat),
                "renew": _timed(lambda: table.renew(me, epoch, REAP), repeat),
                "waiting": _timed(lambda: table.waiting(None, REAP), repeat),
            }
        finally:
            table.close()
    medians = {call: statistics.median(times) for call, times in runs.items()}
    return {
        "rtt_seconds": rtt,
        "runs": runs,
        "median_seconds": medians,
        "round_trips": {call: int(seconds // rtt) for call, seconds in medians.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks lease-latency")
    parser.add_argument("--rtt", type=parse_duration, default="40ms", help="round-trip time")
    parser.add_argument("--repeat", type=int, default=15, help="calls of each kind")
    parser.add_argument(
        "--postgresql", default=DEFAULT_SERVER, help=f"server URL (default {DEFAULT_SERVER})"
    )
    parser.add_argument("--output", type=Path, help="write the JSON here, not to results/")
    args = parser.parse_args(argv)
    if args.rtt <= 0 or args.repeat < 1:
        parser.error("--rtt and --repeat must be positive")
    report = run(args.postgresql, args.rtt, args.repeat)
    for call, seconds in report["median_seconds"].items():
        trips = report["round_trips"][call]
        print(f"{call:8} {seconds * 1000:6.1f} ms, {trips} round trips of {args.rtt * 1000:.0f} ms")
    path = save("lease_latency", {"options": vars(args) | {"output": None}, **report}, args.output)
    print(f"saved {path}")
    return 0
