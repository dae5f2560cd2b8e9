"""Large messages through a node: a producer process sends ``--total`` bytes in messages
of ``--size`` bytes (default 1 GiB in 10 MiB messages) to a node process, and a consumer
process receives them, durable and non-durable, against the raw socket ceiling.

For each mode it starts a fresh node (``benchmarks.node_throughput.start_node``: its own
data-dir, port 0) and reads its idle RSS; then a consumer process and, once that consumes, a
producer process (both ``python -m benchmarks.node_large producer|consumer``, the roles of
``benchmarks.roles``, which the bridge benchmark runs too). The producer writes one body
file of ``--size`` random bytes and sends it as a file object per message (so it streams as
SEND_LARGE_BEGIN and 256 KiB chunks, never whole in memory), keeping to
``Client.address_writable``; the consumer receives each into its spool file, checks its
sequence and size (and with ``--verify`` its CRC-32) and acknowledges it. The figures:

- **MB/s end to end** (10^6 bytes): bytes delivered / (consumer's last receipt -
  producer's first send); a large message is delivered once its last chunk is in;
- **node RSS**: idle, and peak (VmHWM before it is stopped); the producer's and the
  consumer's peak RSS (their own VmHWM);
- CPU seconds of the node, the producer and the consumer.

The **raw ceiling** is ``benchmarks.peers raw-writer``/``raw-reader`` moving the same
bytes in 256 KiB frames (the chunk size) over plain blocking sockets between two
processes, in the same run; ours / raw is reported per mode.

    python -m benchmarks large [--total 1GiB] [--size 10MiB] [--modes durable,non-durable]
                               [--producer-window 1MiB] [--consumer-window 1MiB]
                               [--verify] [--profile DIR] [--output FILE]

prints a table and writes benchmarks/results/node_large.json (or ``--output``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from twisted.logger import globalLogBeginner, textFileLogObserver

from benchmarks import node_throughput
from benchmarks.disk import synced_write_ceiling
from benchmarks.node_peers import run
from benchmarks.node_throughput import (
    NODE_CONFIG,
    BenchmarkError,
    Child,
    _py_spy,
    children,
    proc_cpu,
    proc_status,
    role_process,
)
from benchmarks.roles import consume_large, large_role_arguments, produce_large
from benchmarks.runner import peers, save
from bridge.client.session import DEFAULT_CHUNK_SIZE
from bridge.config.units import parse_size
from transport.allocator import tune_allocator

MB = 1_000_000
MIB = 1024 * 1024
MODES = ("durable", "non-durable")
TARGET_MB_S = {"durable": 400.0}
RSS_TARGET = 100 * MIB


# -- the producer and consumer processes (benchmarks.roles) --------------------------------


def role_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.node_large")
    roles = parser.add_subparsers(dest="role", required=True)
    for name in ("producer", "consumer"):
        large_role_arguments(roles.add_parser(name), producer=name == "producer")
    args = parser.parse_args(argv)
    tune_allocator()
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    return run(produce_large if args.role == "producer" else consume_large, args)


# -- the benchmark ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Windows:
    """The producer window the node grants and the consumer's window, in bytes."""

    producer: int = MIB
    consumer: int = MIB


def start_node(
    directory: Path, stack: ExitStack, deadline: float, producer_window: int
) -> tuple[Child, int]:
    """The node benchmark's node, its acceptor granting ``producer_window`` bytes of
    producer credit; returns it once started, with its core port."""
    acceptor = 'protocols = ["core"]\n'
    config = NODE_CONFIG.replace(acceptor, f"{acceptor}producer-window-size = {producer_window}\n")
    return node_throughput.start_node(directory, stack, deadline, config)


def _role(role: str, args: Sequence[str], directory: Path, stack: ExitStack) -> Child:
    return role_process("benchmarks.node_large", role, args, directory, stack)


def one_run(
    durable: bool,
    count: int,
    size: int,
    *,
    windows: Windows,
    verify: bool,
    seconds: float,
    profile: Path | None,
) -> dict[str, Any]:
    """A fresh node, one producer and one consumer: the figures of that run."""
    mode = "durable" if durable else "non-durable"
    deadline = time.monotonic() + seconds
    with tempfile.TemporaryDirectory(prefix="txbridge-large-bench-") as folder, children() as stack:
        directory = Path(folder)
        node, port = start_node(directory, stack, deadline, windows.producer)
        idle_rss = proc_status(node.pid, "VmRSS")
        url = f"tcp://127.0.0.1:{port}"
        common = ["--url", url, "--count", str(count), "--size", str(size)]
        checks = ["--window", str(windows.consumer), *(["--verify"] if verify else [])]
        consumer = _role("consumer", [*common, *checks], directory, stack)
        consumer.event("ready", deadline)
        spy = None if profile is None else _py_spy(node.pid, profile / mode, directory, stack)
        node_cpu = proc_cpu(node.pid)
        durability = ["--durable"] if durable else []
        producer = _role("producer", [*common, *durability], directory, stack)
        connected = producer.event("connected", deadline)
        done = producer.event("done", deadline)
        consumer.tell(f"sent {done['confirmed']}")
        received = consumer.event("received", deadline)
        node_cpu = proc_cpu(node.pid) - node_cpu
        peak_rss = proc_status(node.pid, "VmHWM")
        if spy is not None:
            spy.stop(signal.SIGINT)
        node_exit = node.stop(signal.SIGTERM)
    elapsed = received["last"] - done["first_send"]
    figures = {
        "mode": mode,
        "sent": done["sent"],
        "confirmed": done["confirmed"],
        "refused": done["refused"],
        "first_error": done["first_error"],
        "delivered": received["received"],
        "bytes": received["bytes"],
        "out_of_order": received["out_of_order"],
        "wrong_size": received["wrong_size"],
        "crc_ok": (not verify) or received["crcs"] == [connected["crc"]],
        "seconds": elapsed,
        "mb_per_s": received["bytes"] / MB / elapsed if elapsed > 0 else 0.0,
        "node_idle_rss": idle_rss,
        "node_peak_rss": peak_rss,
        "node_exit": node_exit,
        "producer_peak_rss": done["peak_rss"],
        "consumer_peak_rss": received["peak_rss"],
        "cpu_seconds": {"node": node_cpu, "producer": done["cpu"], "consumer": received["cpu"]},
        "pids": {"node": node.pid, "producer": producer.pid, "consumer": consumer.pid},
    }
    check(figures)
    return figures


def check(run: dict[str, Any]) -> None:
    """Every message confirmed and delivered once, in order, whole."""
    problems = []
    if run["refused"]:
        problems.append(f"{run['refused']} sends refused (first: {run['first_error']})")
    if run["confirmed"] != run["sent"] or run["delivered"] != run["sent"]:
        problems.append(
            f"{run['sent']} sent, {run['confirmed']} confirmed, {run['delivered']} delivered"
        )
    if run["out_of_order"] or run["wrong_size"] or not run["crc_ok"]:
        problems.append(
            f"{run['out_of_order']} out of order, {run['wrong_size']} of the wrong size, "
            f"CRC {'ok' if run['crc_ok'] else 'wrong'}"
        )
    if problems:
        raise BenchmarkError(f"{run['mode']} run: " + "; ".join(problems))


def raw_ceiling(total: int) -> dict[str, Any]:
    """``total`` bytes in 256 KiB frames over plain blocking sockets, process to process."""
    with peers() as start:
        reader = start(
            ["raw-reader", "--url", "tcp://127.0.0.1:0", "--frame-size", str(DEFAULT_CHUNK_SIZE)]
        )
        port = reader.until("listening")["port"]
        start(
            [
                "raw-writer",
                "--url",
                f"tcp://127.0.0.1:{port}",
                "--bytes",
                str(total),
                "--frame-size",
                str(DEFAULT_CHUNK_SIZE),
            ]
        ).until("done")
        received = reader.until("received")
    elapsed = received["elapsed"]
    rate = received["received"] / MB / elapsed if elapsed > 0 else 0.0
    return {"seconds": elapsed, "bytes": received["received"], "mb_per_s": rate}


def benchmark(
    *,
    total: int,
    size: int,
    modes: Sequence[str],
    windows: Windows,
    verify: bool,
    seconds: float,
    profile: Path | None,
) -> dict[str, Any]:
    count = max(1, total // size)
    raw = raw_ceiling(count * size)
    print(f"{'raw sockets':12} {raw['mb_per_s']:>8,.0f} MB/s (256 KiB frames, ceiling)", flush=True)
    disk = synced_write_ceiling(count, size) if "durable" in modes else None
    if disk is not None:
        print(
            f"{'synced disk':12} {disk['mb_per_s']:>8,.0f} MB/s (files synced, durable ceiling)",
            flush=True,
        )
    cases: dict[str, Any] = {}
    for mode in modes:
        figures = one_run(
            mode == "durable",
            count,
            size,
            windows=windows,
            verify=verify,
            seconds=seconds,
            profile=profile,
        )
        figures["ratio_ours_to_raw"] = figures["mb_per_s"] / raw["mb_per_s"]
        if mode == "durable" and disk is not None:
            figures["ratio_ours_to_disk"] = figures["mb_per_s"] / disk["mb_per_s"]
        figures["target_mb_per_s"] = TARGET_MB_S.get(mode)
        cases[mode] = figures
        print(
            f"{mode:12} {figures['mb_per_s']:>8,.0f} MB/s   ours/raw "
            f"{figures['ratio_ours_to_raw']:.3f}{_disk_ratio(figures)}   node RSS idle "
            f"{figures['node_idle_rss'] / MIB:.1f} MiB peak {figures['node_peak_rss'] / MIB:.1f} "
            f"MiB   producer peak {figures['producer_peak_rss'] / MIB:.1f} MiB   consumer "
            f"peak {figures['consumer_peak_rss'] / MIB:.1f} MiB   CPU s node "
            f"{figures['cpu_seconds']['node']:.1f} producer "
            f"{figures['cpu_seconds']['producer']:.1f} consumer "
            f"{figures['cpu_seconds']['consumer']:.1f}",
            flush=True,
        )
    return {"count": count, "raw": raw, "disk": disk, "cases": cases}


def _disk_ratio(figures: dict[str, Any]) -> str:
    ratio = figures.get("ratio_ours_to_disk")
    return "" if ratio is None else f"   ours/disk {ratio:.2f}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("producer", "consumer"):
        return role_main(argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks large")
    parser.add_argument("--total", default="1GiB", help="bytes per mode (default 1GiB)")
    parser.add_argument("--size", default="10MiB", help="bytes per message (default 10MiB)")
    parser.add_argument("--modes", default=",".join(MODES), help="durable,non-durable")
    parser.add_argument("--producer-window", default="1MiB", help="the node's, default 1MiB")
    parser.add_argument("--consumer-window", default="1MiB", help="the consumer's, default 1MiB")
    parser.add_argument("--verify", action="store_true", help="the consumer checks CRC-32s")
    parser.add_argument("--seconds", type=float, default=600.0, help="bound on each run")
    parser.add_argument("--profile", type=Path, help="record the node with py-spy into this folder")
    parser.add_argument("--output", type=Path, help="write the JSON here, not benchmarks/results/")
    args = parser.parse_args(argv)
    try:
        total, size = parse_size(args.total), parse_size(args.size)
        windows = Windows(parse_size(args.producer_window), parse_size(args.consumer_window))
    except ValueError as error:
        parser.error(str(error))
    modes = [mode for mode in args.modes.split(",") if mode]
    if not modes or any(mode not in MODES for mode in modes):
        parser.error(f"--modes takes {','.join(MODES)}, got {args.modes!r}")
    if size < 1 or total < size:
        parser.error("--size must be positive and at most --total")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    try:
        results = benchmark(
            total=total,
            size=size,
            modes=modes,
            windows=windows,
            verify=args.verify,
            seconds=args.seconds,
            profile=args.profile,
        )
    except BenchmarkError as error:
        print(f"large-message benchmark failed: {error}", file=sys.stderr)
        return 1
    figures = {
        "total": total,
        "size": size,
        "windows": asdict(windows),
        "rss_target": RSS_TARGET,
        **results,
    }
    path = save("node_large", figures, args.output)
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
