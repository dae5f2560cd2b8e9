"""Bridge throughput: node A -> core bridge -> node B -> consumer, each node its own
process, against the raw socket ceiling for the same bytes in the same run.

For each case it starts two fresh nodes (``benchmarks.node_throughput.start_node``: their
own data-dirs, port 0): B first, then A with one ``[[bridge]]`` table in its TOML that
forwards its queue ``bench`` to B's address ``bench`` (duplicate detection on). Then a
consumer process on B and, once that consumes, a producer process on A (roles of this
module: ``python -m benchmarks.bridge_throughput producer|consumer|large-producer|
large-consumer``). The cases:

- **durable / non-durable 1 KiB**: the node benchmark's producer and consumer
  (``benchmarks.node_peers``), each body carrying its send time (``time.monotonic_ns``)
  after its sequence number, so the consumer times every message end to end;
- **durable 10 MiB** (and non-durable with ``--modes``): the large-message benchmark's
  producer and consumer (``benchmarks.roles``), streamed as 256 KiB chunks, the send
  time in a header.

The figures:

- **msgs/s** and **MB/s** (10^6 bytes) end to end: delivered / (the consumer's last
  receipt - the producer's first send); ``time.monotonic`` is one clock for every process;
- **end-to-end latency** p50/p99/max: from the producer's ``send_nowait`` to the
  consumer's ``on_message`` (for a large message: once its last chunk is in), every
  message, under full load;
- **peak RSS** of both nodes (VmHWM just before they are stopped) and their idle RSS; the
  bridge runs in node A;
- CPU seconds of both nodes, the producer and the consumer.

The **raw ceiling** is ``benchmarks.peers raw-writer``/``raw-reader`` over plain blocking
sockets between two processes moving the same bytes: as many 1 KiB frames as messages
(``node_throughput.raw_ceiling``), and the large case's bytes in 256 KiB frames
(``node_large.raw_ceiling``). A message through the bridge crosses loopback three times
(producer -> A -> B -> consumer); the ceiling is one crossing. For the durable large case
the **synced-disk ceiling** (``benchmarks.disk``) is measured too: both nodes share the one
disk and each syncs every body before confirming it, so the bridge can move at most half
of what the disk syncs (``ours/disk`` is against that half).

    python -m benchmarks bridge [--count 100000] [--total 1GiB] [--size 10MiB]
                                [--cases durable,non-durable,large] [--repeat 1]
                                [--confirmation-window 1MiB] [--producer-window 1MiB]
                                [--profile DIR] [--output FILE]

prints a table and writes benchmarks/results/bridge_throughput.json (or ``--output``).
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from twisted.internet import reactor, stdio
from twisted.logger import globalLogBeginner, textFileLogObserver

from benchmarks import node_large, node_peers, node_throughput, roles
from benchmarks.disk import synced_write_ceiling
from benchmarks.node_peers import cpu_seconds
from benchmarks.node_throughput import (
    NODE_CONFIG,
    BenchmarkError,
    Child,
    _py_spy,
    children,
    proc_cpu,
    proc_status,
    role_process,
    start_node,
)
from benchmarks.peers import SEQ_BYTES, Payloads, current_rss, emit, peak_rss
from benchmarks.roles import large_role_arguments, latency_summary
from benchmarks.runner import save
from bridge.client.api import ReceivedMessage, connect
from bridge.config.units import parse_size
from transport.allocator import tune_allocator

KIB = 1024
MIB = 1024 * 1024
MB = 1_000_000
QUEUE = "bench"
BRIDGE = "a-to-b"
CASES = ("durable", "non-durable", "large", "large-non-durable")
DEFAULT_CASES = ("durable", "non-durable", "large")
TARGETS: dict[str, tuple[str, float]] = {
    "durable": ("msgs_per_s", 15_000),
    "non-durable": ("msgs_per_s", 30_000),
    "large": ("mb_per_s", 400.0),
}
RSS_TARGET = 100 * MIB
TIME_BYTES = 8
"""A 1 KiB body: its sequence number, its send time (monotonic ns), then filler."""


# -- the nodes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BridgeSettings:
    """The bridge's windows (bytes) and the producer window the nodes' acceptors grant."""

    confirmation_window: int = MIB
    producer_window: int = MIB
    acceptor_producer_window: int = MIB
    retry_interval: str = "500ms"
    duplicate_detection: bool = True
    """The bridge's ``use-duplicate-detection``."""


def node_config(name: str, producer_window: int, bridges: str = "") -> str:
    """The node benchmark's node, named ``name``, its acceptor granting ``producer_window``
    bytes of producer credit, with ``bridges`` (``[[bridge]]`` tables) appended."""
    acceptor = 'protocols = ["core"]\n'
    config = NODE_CONFIG.replace('name = "bench"', f'name = "{name}"', 1).replace(
        acceptor, f"{acceptor}producer-window-size = {producer_window}\n"
    )
    return config + bridges


def bridge_table(target: str, settings: BridgeSettings, name: str = BRIDGE) -> str:
    """One ``[[bridge]]`` table: queue ``bench`` to ``target``'s address ``bench``."""
    return f"""
[[bridge]]
name = "{name}"
queue = "{QUEUE}"
target = "{target}"
forwarding-address = "{QUEUE}"
confirmation-window-size = {settings.confirmation_window}
producer-window-size = {settings.producer_window}
retry-interval = "{settings.retry_interval}"
reconnect-attempts = -1
use-duplicate-detection = {"true" if settings.duplicate_detection else "false"}
"""


def start_pair(
    directory: Path, stack: ExitStack, deadline: float, settings: BridgeSettings
) -> tuple[Child, int, Child, int]:
    """Node B, then node A bridging its queue ``bench`` to B: ``(a, a_port, b, b_port)``."""
    window = settings.acceptor_producer_window
    (directory / "b").mkdir(parents=True, exist_ok=True)
    (directory / "a").mkdir(parents=True, exist_ok=True)
    b, b_port = start_node(directory / "b", stack, deadline, node_config("b", window))
    bridges = bridge_table(f"tcp://127.0.0.1:{b_port}", settings)
    a, a_port = start_node(directory / "a", stack, deadline, node_config("a", window, bridges))
    a.name, b.name = "node A", "node B"
    return a, a_port, b, b_port


# -- the producer and consumer processes ----------------------------------------------------


class TimedPayloads(Payloads):
    """1 KiB bodies: the sequence number, the send time in ns, then the fixed block."""

    def __init__(self, size: int) -> None:
        super().__init__(max(size, SEQ_BYTES + TIME_BYTES))
        self._tail = self._block[TIME_BYTES:]

    def make(self, seq: int) -> bytes:
        return seq.to_bytes(SEQ_BYTES, "big") + time.monotonic_ns().to_bytes(8, "big") + self._tail


class TimedProducer(node_peers.Producer):
    def __init__(self, client: Any, args: argparse.Namespace) -> None:
        super().__init__(client, args)
        self.payloads = TimedPayloads(args.size)


class TimedConsumer(node_peers.Consumer):
    """The node benchmark's consumer, also timing each message from its send."""

    def __init__(self, count: int, ack_every: int) -> None:
        super().__init__(count, ack_every)
        self.latencies: list[int] = []

    def on_message(self, message: ReceivedMessage) -> None:
        sent = int.from_bytes(message.body[SEQ_BYTES : SEQ_BYTES + TIME_BYTES], "big")
        self.latencies.append(time.monotonic_ns() - sent)
        super().on_message(message)


async def produce(args: argparse.Namespace) -> None:
    client = await connect(reactor, args.url, confirmation_window_size=args.window)
    emit("connected", idle_rss=current_rss())
    producer = TimedProducer(client, args)
    cpu = cpu_seconds()
    producer.start()
    await producer.done
    emit("done", **producer.summary(), cpu=cpu_seconds() - cpu, peak_rss=peak_rss())
    await client.close()


async def consume(args: argparse.Namespace) -> None:
    consumer = TimedConsumer(args.count, args.ack_every)
    stdio.StandardIO(node_peers._Expect(consumer))
    client = await connect(reactor, args.url)
    await client.consumer(args.queue, window_size=args.window, on_message=consumer.on_message)
    cpu = cpu_seconds()
    emit("ready", idle_rss=current_rss())
    last = await consumer.done
    if last is not None:
        await last.ack_durably(cumulative=True)
    emit(
        "received",
        **consumer.summary(),
        **latency_summary(consumer.latencies),
        cpu=cpu_seconds() - cpu,
        peak_rss=peak_rss(),
    )
    await client.close()


ROLES = {
    "producer": produce,
    "consumer": consume,
    "large-producer": roles.produce_large,
    "large-consumer": roles.consume_large,
}


def role_main(argv: list[str]) -> int:
    role = argv[0]
    if role in ("producer", "consumer"):
        args = node_peers.parser().parse_args(argv)
    else:
        parser = argparse.ArgumentParser(prog=f"python -m benchmarks.bridge_throughput {role}")
        large_role_arguments(parser, producer=role == "large-producer")
        args = parser.parse_args(argv[1:])
    tune_allocator()
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    return node_peers.run(ROLES[role], args)


# -- the benchmark --------------------------------------------------------------------------


def _role(role: str, args: Sequence[str], directory: Path, stack: ExitStack) -> Child:
    return role_process("benchmarks.bridge_throughput", role, args, directory, stack)


@dataclass(frozen=True)
class Case:
    name: str
    durable: bool
    large: bool
    count: int
    size: int


def one_run(
    case: Case,
    *,
    settings: BridgeSettings,
    seconds: float,
    profile: Path | None,
) -> dict[str, Any]:
    """Fresh nodes A and B, the bridge, one producer on A and one consumer on B."""
    deadline = time.monotonic() + seconds + 120.0
    with (
        tempfile.TemporaryDirectory(prefix="txbridge-bridge-bench-") as folder,
        children() as stack,
    ):
        directory = Path(folder)
        a, a_port, b, b_port = start_pair(directory, stack, deadline, settings)
        idle = {"a": proc_status(a.pid, "VmRSS"), "b": proc_status(b.pid, "VmRSS")}
        durable = ["--durable"] if case.durable else []
        count = ["--count", str(case.count)]
        if case.large:
            size = ["--size", str(case.size)]
            consumer = _role(
                "large-consumer",
                ["--url", f"tcp://127.0.0.1:{b_port}", *count, *size],
                directory,
                stack,
            )
        else:
            consumer = _role(
                "consumer",
                ["--url", f"tcp://127.0.0.1:{b_port}", *count, "--ack-every", "500"],
                directory,
                stack,
            )
        consumer.event("ready", deadline)
        spies = []
        if profile is not None:
            for name, node in (("a", a), ("b", b)):
                spies.append(_py_spy(node.pid, profile / f"{case.name}-{name}", directory, stack))
        cpu = {"a": proc_cpu(a.pid), "b": proc_cpu(b.pid)}
        url = ["--url", f"tcp://127.0.0.1:{a_port}"]
        if case.large:
            producer = _role("large-producer", [*url, *count, *size, *durable], directory, stack)
        else:
            producer = _role(
                "producer",
                [*url, *count, "--size", str(case.size), "--seconds", str(seconds), *durable],
                directory,
                stack,
            )
        done = producer.event("done", deadline)
        consumer.tell(f"sent {done['confirmed']}")
        received = consumer.event("received", deadline)
        cpu = {name: proc_cpu(node.pid) - cpu[name] for name, node in (("a", a), ("b", b))}
        peak = {"a": proc_status(a.pid, "VmHWM"), "b": proc_status(b.pid, "VmHWM")}
        for spy in spies:
            spy.stop(signal.SIGINT)
        exits = {"a": a.stop(signal.SIGTERM), "b": b.stop(signal.SIGTERM)}
    elapsed = received["last"] - done["first_send"]
    delivered = received["received"]
    body_bytes = received["bytes"] if case.large else delivered * case.size
    figures = {
        "case": case.name,
        "durable": case.durable,
        "size": case.size,
        "sent": done["sent"],
        "confirmed": done["confirmed"],
        "refused": done["refused"],
        "first_error": done["first_error"],
        "delivered": delivered,
        "out_of_order": received["out_of_order"],
        "duplicates": received.get("duplicates", 0),
        "redelivered": received.get("redelivered", 0),
        "wrong_size": received.get("wrong_size", 0),
        "seconds": elapsed,
        "msgs_per_s": delivered / elapsed if elapsed > 0 else 0.0,
        "mb_per_s": body_bytes / MB / elapsed if elapsed > 0 else 0.0,
        "e2e_p50_ms": received["e2e_p50_ms"],
        "e2e_p99_ms": received["e2e_p99_ms"],
        "e2e_max_ms": received["e2e_max_ms"],
        "latency_samples": received["latency_samples"],
        "node_idle_rss": idle,
        "node_peak_rss": peak,
        "node_exit": exits,
        "producer_peak_rss": done["peak_rss"],
        "consumer_peak_rss": received["peak_rss"],
        "cpu_seconds": {**cpu, "producer": done["cpu"], "consumer": received["cpu"]},
    }
    check(figures)
    return figures


def check(run: dict[str, Any]) -> None:
    """Every message confirmed, forwarded and delivered once, in order."""
    problems = []
    if run["refused"]:
        problems.append(f"{run['refused']} sends refused (first: {run['first_error']})")
    if run["delivered"] != run["confirmed"] or run["confirmed"] != run["sent"]:
        problems.append(
            f"{run['sent']} sent, {run['confirmed']} confirmed, {run['delivered']} delivered"
        )
    for key in ("out_of_order", "duplicates", "redelivered", "wrong_size"):
        if run[key]:
            problems.append(f"{run[key]} {key.replace('_', ' ')}")
    if problems:
        raise BenchmarkError(f"{run['case']} run: " + "; ".join(problems))


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(run[key] for run in runs))


def benchmark(
    *,
    cases: Sequence[str],
    count: int,
    total: int,
    size: int,
    repeat: int,
    settings: BridgeSettings,
    seconds: float,
    profile: Path | None,
) -> dict[str, Any]:
    large_count = max(1, total // size)
    raw_small = node_throughput.raw_ceiling(count)
    raw_small["mb_per_s"] = count * KIB / MB / raw_small["seconds"]
    print(
        f"{'raw sockets':18} {raw_small['frames_per_s']:>10,.0f} frames/s "
        f"({count:,} x 1 KiB, ceiling)",
        flush=True,
    )
    raw_large: dict[str, Any] | None = None
    if any(name.startswith("large") for name in cases):
        raw_large = node_large.raw_ceiling(large_count * size)
        print(
            f"{'raw sockets':18} {raw_large['mb_per_s']:>10,.0f} MB/s "
            f"({large_count * size / MIB:,.0f} MiB in 256 KiB frames, ceiling)",
            flush=True,
        )
    disk: dict[str, Any] | None = None
    if "large" in cases:
        disk = synced_write_ceiling(large_count, size)
        disk["bridge_mb_per_s"] = disk["mb_per_s"] / 2
        print(
            f"{'synced disk':18} {disk['mb_per_s']:>10,.0f} MB/s (files synced); both nodes "
            f"store each durable body on it: {disk['bridge_mb_per_s']:,.0f} MB/s ceiling",
            flush=True,
        )
    results: dict[str, Any] = {}
    for name in cases:
        large = name.startswith("large")
        case = Case(
            name,
            durable=name in ("durable", "large"),
            large=large,
            count=large_count if large else count,
            size=size if large else KIB,
        )
        runs = [
            one_run(case, settings=settings, seconds=seconds, profile=profile)
            for _ in range(repeat)
        ]
        figures: dict[str, Any] = {
            key: _median(runs, key)
            for key in ("msgs_per_s", "mb_per_s", "e2e_p50_ms", "e2e_p99_ms", "e2e_max_ms")
        }
        figures["node_peak_rss"] = {
            node: max(run["node_peak_rss"][node] for run in runs) for node in ("a", "b")
        }
        figures["node_idle_rss"] = {
            node: statistics.median(run["node_idle_rss"][node] for run in runs)
            for node in ("a", "b")
        }
        if large:
            assert raw_large is not None
            figures["ratio_ours_to_raw"] = figures["mb_per_s"] / raw_large["mb_per_s"]
            if disk is not None and case.durable:
                figures["ratio_ours_to_disk"] = figures["mb_per_s"] / disk["bridge_mb_per_s"]
        else:
            figures["ratio_ours_to_raw"] = figures["msgs_per_s"] / raw_small["frames_per_s"]
        target = TARGETS.get(name)
        figures["target"] = None if target is None else {"figure": target[0], "value": target[1]}
        figures["rss_target"] = RSS_TARGET
        figures["runs"] = runs
        results[name] = figures
        rate = (
            f"{figures['mb_per_s']:>8,.0f} MB/s"
            if large
            else f"{figures['msgs_per_s']:>8,.0f} msgs/s"
        )
        wanted = "" if target is None else f" (target {target[1]:,.0f})"
        to_disk = figures.get("ratio_ours_to_disk")
        print(
            f"{name:18} {rate}{wanted}   ours/raw {figures['ratio_ours_to_raw']:.3f}"
            + ("" if to_disk is None else f"   ours/disk {to_disk:.2f}")
            + "   "
            f"e2e p50 {figures['e2e_p50_ms']:.1f} ms p99 {figures['e2e_p99_ms']:.1f} ms   "
            f"peak RSS A {figures['node_peak_rss']['a'] / MIB:.1f} MiB "
            f"B {figures['node_peak_rss']['b'] / MIB:.1f} MiB",
            flush=True,
        )
    raw = {"small": raw_small, "large": raw_large}
    return {"large_count": large_count, "raw": raw, "disk": disk, "cases": results}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ROLES:
        return role_main(argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks bridge")
    parser.add_argument("--count", type=int, default=100_000, help="1 KiB messages per run")
    parser.add_argument("--total", default="1GiB", help="bytes of large messages per run")
    parser.add_argument("--size", default="10MiB", help="bytes per large message")
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES), help=f"of {','.join(CASES)}")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case (median kept)")
    parser.add_argument("--confirmation-window", default="1MiB", help="the bridge's")
    parser.add_argument("--producer-window", default="1MiB", help="the bridge's and acceptors'")
    parser.add_argument("--seconds", type=float, default=300.0, help="bound on each run")
    parser.add_argument("--profile", type=Path, help="record both nodes with py-spy here")
    parser.add_argument("--output", type=Path, help="write the JSON here, not benchmarks/results/")
    args = parser.parse_args(argv)
    try:
        total, size = parse_size(args.total), parse_size(args.size)
        window = parse_size(args.producer_window)
        settings = BridgeSettings(parse_size(args.confirmation_window), window, window)
    except ValueError as error:
        parser.error(str(error))
    cases = [name for name in args.cases.split(",") if name]
    if not cases or any(name not in CASES for name in cases):
        parser.error(f"--cases takes {','.join(CASES)}, got {args.cases!r}")
    if args.count < 1 or args.repeat < 1 or size < 1 or total < size:
        parser.error("--count, --repeat and --size must be positive, --total at least --size")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    try:
        results = benchmark(
            cases=cases,
            count=args.count,
            total=total,
            size=size,
            repeat=args.repeat,
            settings=settings,
            seconds=args.seconds,
            profile=args.profile,
        )
    except BenchmarkError as error:
        print(f"bridge benchmark failed: {error}", file=sys.stderr)
        return 1
    figures = {
        "count": args.count,
        "total": total,
        "size": size,
        "repeat": args.repeat,
        "bridge": asdict(settings),
        "rss_target": RSS_TARGET,
        **results,
    }
    path = save("bridge_throughput", figures, args.output)
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
