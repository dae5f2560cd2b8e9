"""STOMP throughput: a stomp.py producer and a stomp.py consumer process through a node
process's STOMP acceptor, 1 KiB messages, persistent and non-persistent.

For each mode and run it starts a fresh node (``txbridge node``, its own data-dir, port 0,
a STOMP acceptor only), then the consumer (``python -m benchmarks.stomp_throughput
consumer``: SUBSCRIBE ``/queue/bench`` with ``ack:client`` and the acceptor's default
prefetch, a cumulative ACK every ``--ack-every`` messages), and once it has its receipt
the producer (``... producer``: SEND after SEND, ``persistent:true`` in the persistent
mode, a receipt on the last one only: receipts are in order, so that one confirms them
all). Every body starts with its sequence number, so the consumer checks order, loss,
duplicates and redeliveries. The figures:

- **msgs/s end to end**: messages delivered / (consumer's last MESSAGE - producer's first
  SEND), ``time.monotonic`` being one clock for all processes;
- **sends/s**: messages sent / (the last receipt - the first SEND);
- node idle and peak RSS, and CPU seconds of the node and of each client per 100,000
  messages.

    python -m benchmarks stomp [--count 100000] [--repeat 3] [--mode persistent]
                               [--ack auto]   (the consumer as peers-stomp's: ack:auto)
                               [--profile DIR]  (py-spy records the node: the [dev] extra)

prints a table and writes benchmarks/results/stomp_throughput.json (``--output`` elsewhere).
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import stomp

from benchmarks.node_throughput import (
    BenchmarkError,
    Child,
    _py_spy,
    children,
    median_of,
    proc_cpu,
    proc_status,
    role_process,
    start_node,
)
from benchmarks.peers import SEQ_BYTES, Payloads, emit, peak_rss
from benchmarks.runner import save
from transport.allocator import tune_allocator

KIB = 1024
MIB = 1024 * 1024
MODES = ("persistent", "non-persistent")
DESTINATION = "/queue/bench"
TARGETS = {"persistent": 25_000, "non-persistent": 25_000}
"""RabbitMQ's figures with stomp.py on this kind of machine (the issue's target)."""

NODE_CONFIG = """\
[node]
name = "bench"
data-dir = "data"

[[acceptor]]
name = "stomp"
url = "tcp://127.0.0.1:0"
protocols = ["stomp"]

[[address]]
name = "bench"
routing = "anycast"

[security]
enabled = false
"""


CLIENT_MMAP_THRESHOLD = 32 * MIB
"""A client's allocator with ``--tune-allocator``: glibc's largest mmap threshold, above
a 10 MiB frame and each copy stomp.py makes of one (``transport.allocator``'s 8 MiB is
below them, and a fixed threshold would map every one afresh)."""
CLIENT_TRIM_THRESHOLD = 64 * MIB


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def page_faults() -> int:
    """This process's minor page faults so far: each a fresh page touched (on a virtual
    machine that hands freed memory back to its host, one the host must find again)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


# -- the client processes ----------------------------------------------------------------


def _connection(port: int, vhost: str | None = None) -> Any:
    """A STOMP 1.2 connection to 127.0.0.1:``port``; ``vhost`` is its ``host`` header
    (stomp.py sends the host name by default; RabbitMQ takes it as the virtual host)."""
    return stomp.Connection12([("127.0.0.1", port)], auto_decode=False, vhost=vhost)


class _Receipts(stomp.ConnectionListener):  # type: ignore[misc]
    """Records receipts and errors (in stomp.py's thread)."""

    def __init__(self) -> None:
        self.receipts: dict[str, float] = {}
        self.error: str | None = None
        self.changed = threading.Condition()

    def on_receipt(self, frame: Any) -> None:
        with self.changed:
            self.receipts[frame.headers["receipt-id"]] = time.monotonic()
            self.changed.notify_all()

    def on_error(self, frame: Any) -> None:
        with self.changed:
            self.error = f"{frame.headers.get('message')}: {frame.body!r}"
            self.changed.notify_all()

    def wait(self, receipt: str, timeout: float) -> float:
        with self.changed:
            self.changed.wait_for(
                lambda: receipt in self.receipts or self.error is not None, timeout
            )
        if self.error is not None:
            raise BenchmarkError(f"the broker answered ERROR: {self.error}")
        if receipt not in self.receipts:
            raise BenchmarkError(f"no receipt {receipt!r} within {timeout}s")
        return self.receipts[receipt]

    def why(self, failure: BaseException, timeout: float = 5.0) -> str:
        """Why a write failed: the broker's ERROR frame if one comes within ``timeout``
        (stomp.py reads it in another thread), else the write's own error."""
        with self.changed:
            self.changed.wait_for(lambda: self.error is not None, timeout)
        if self.error is not None:
            return f"the broker answered ERROR: {self.error}"
        return f"{type(failure).__name__}: {failure}"


def producer(args: argparse.Namespace) -> int:
    payloads = Payloads(args.size)
    listener = _Receipts()
    conn = _connection(args.port, args.vhost)
    conn.set_listener("receipts", listener)
    conn.connect(wait=True)
    headers = {"persistent": "true"} if args.persistent else {}
    cpu, faults = cpu_seconds(), page_faults()
    deadline = time.monotonic() + args.seconds
    first_send = time.monotonic()
    sent = 0
    send = conn.send
    try:
        while sent < args.count - 1 and (sent % 1024 or time.monotonic() < deadline):
            send(DESTINATION, payloads.make(sent), headers=headers)
            sent += 1
        send(DESTINATION, payloads.make(sent), headers={**headers, "receipt": "last"})
        sent += 1
    except (OSError, stomp.exception.StompException) as failure:
        raise BenchmarkError(f"SEND {sent} failed: {listener.why(failure)}") from failure
    last_receipt = listener.wait("last", args.seconds + 60)
    emit(
        "done",
        sent=sent,
        first_send=first_send,
        last_receipt=last_receipt,
        time_bounded=sent < args.count,
        cpu=cpu_seconds() - cpu,
        faults=page_faults() - faults,
        peak_rss=peak_rss(),
    )
    conn.disconnect(receipt="bye")
    return 0


class _Consumer(_Receipts):
    """Counts and checks messages (order, duplicates, redeliveries, body sizes),
    acknowledging cumulatively every ``ack_every`` (with ``ack:client``; with ``ack:auto``
    the broker needs none)."""

    def __init__(self, conn: Any, ack_every: int, size: int, client_acks: bool = True) -> None:
        super().__init__()
        self.conn = conn
        self.ack_every = ack_every
        self.size = size
        self.client_acks = client_acks
        self.wrong_size = 0
        self.received = 0
        self.expected = 0
        self.out_of_order = 0
        self.duplicates = 0
        self.redelivered = 0
        self.last = 0.0
        self.target: int | None = None
        self.done = threading.Event()

    def on_message(self, frame: Any) -> None:
        self.last = time.monotonic()
        if len(frame.body) != self.size:
            self.wrong_size += 1
        seq = int.from_bytes(frame.body[:SEQ_BYTES], "big")
        if seq < self.expected:
            self.duplicates += 1
        elif seq > self.expected:
            self.out_of_order += 1
        self.expected = max(self.expected, seq + 1)
        if frame.headers.get("redelivered") == "true":
            self.redelivered += 1
        self.received += 1
        if self.client_acks and (
            self.received % self.ack_every == 0 or self.received == self.target
        ):
            self.conn.ack(frame.headers["ack"])
        if self.target is not None and self.received >= self.target:
            self.done.set()

    def expect(self, count: int) -> None:
        self.target = count
        if self.received >= count:
            self.done.set()


def consumer(args: argparse.Namespace) -> int:
    conn = _connection(args.port, args.vhost)
    listener = _Consumer(conn, args.ack_every, args.size, args.ack == "client")
    listener.target = args.count
    conn.set_listener("consumer", listener)
    conn.connect(wait=True)
    cpu, faults = cpu_seconds(), page_faults()
    conn.subscribe(DESTINATION, id="bench", ack=args.ack, headers={"receipt": "subscribed"})
    listener.wait("subscribed", 30)
    emit("ready")
    for line in sys.stdin:
        if line.startswith("sent "):
            listener.expect(int(line.split()[1]))
            break
    if not listener.done.wait(args.seconds + 60):
        raise BenchmarkError(f"received {listener.received} of {listener.target} in time")
    emit(
        "received",
        received=listener.received,
        last=listener.last,
        out_of_order=listener.out_of_order,
        duplicates=listener.duplicates,
        redelivered=listener.redelivered,
        wrong_size=listener.wrong_size,
        cpu=cpu_seconds() - cpu,
        faults=page_faults() - faults,
        peak_rss=peak_rss(),
    )
    conn.disconnect(receipt="bye")
    return 0


# -- the benchmark -------------------------------------------------------------------------


def _start_node(directory: Path, stack: ExitStack, deadline: float) -> tuple[Child, int]:
    return start_node(directory, stack, deadline, NODE_CONFIG, acceptor="stomp")


def _client(role: str, args: Sequence[str], directory: Path, stack: ExitStack) -> Child:
    return role_process("benchmarks.stomp_throughput", role, args, directory, stack)


def one_run(
    persistent: bool,
    count: int,
    seconds: float,
    ack_every: int,
    *,
    ack: str = "client",
    profile: Path | None = None,
) -> dict[str, Any]:
    """A fresh node, one consumer, one producer: the figures of that run."""
    mode = "persistent" if persistent else "non-persistent"
    deadline = time.monotonic() + seconds + 120.0
    with tempfile.TemporaryDirectory(prefix="txbridge-stomp-bench-") as folder, children() as stack:
        directory = Path(folder)
        node, port = _start_node(directory, stack, deadline)
        idle_rss = proc_status(node.pid, "VmRSS")
        common = ["--port", str(port), "--count", str(count), "--seconds", str(seconds)]
        consumer_child = _client(
            "consumer", [*common, "--ack-every", str(ack_every), "--ack", ack], directory, stack
        )
        consumer_child.event("ready", deadline)
        spy = None
        if profile is not None:
            spy = _py_spy(node.pid, profile / f"node-{mode}", directory, stack)
        node_cpu = proc_cpu(node.pid)
        producer_child = _client(
            "producer", [*common, *(["--persistent"] if persistent else [])], directory, stack
        )
        done = producer_child.event("done", deadline)
        consumer_child.tell(f"sent {done['sent']}")
        received = consumer_child.event("received", deadline)
        node_cpu = proc_cpu(node.pid) - node_cpu
        if spy is not None:
            spy.stop(signal.SIGINT)
        peak_rss_node = proc_status(node.pid, "VmHWM")
        node_exit = node.stop(signal.SIGTERM)
    elapsed = received["last"] - done["first_send"]
    figures = {
        "mode": mode,
        "sent": done["sent"],
        "time_bounded": done["time_bounded"],
        "delivered": received["received"],
        "out_of_order": received["out_of_order"],
        "duplicates": received["duplicates"],
        "redelivered": received["redelivered"],
        "seconds": elapsed,
        "msgs_per_s": received["received"] / elapsed if elapsed > 0 else 0.0,
        "sends_per_s": done["sent"] / (done["last_receipt"] - done["first_send"]),
        "node_idle_rss": idle_rss,
        "node_peak_rss": peak_rss_node,
        "node_exit": node_exit,
        "cpu_seconds": {
            "node": node_cpu,
            "producer": done["cpu"],
            "consumer": received["cpu"],
        },
        "pids": {
            "node": node.pid,
            "producer": producer_child.pid,
            "consumer": consumer_child.pid,
        },
    }
    problems = [
        f"{figures[key]} {key.replace('_', ' ')}"
        for key in ("out_of_order", "duplicates", "redelivered")
        if figures[key]
    ]
    if figures["delivered"] != figures["sent"]:
        problems.append(f"{figures['sent']} sent but {figures['delivered']} delivered")
    if problems:
        raise BenchmarkError(f"{mode} run: " + "; ".join(problems))
    return figures


def run(
    *,
    count: int,
    repeat: int,
    seconds: float,
    ack_every: int,
    modes: Sequence[str],
    ack: str = "client",
    profile: Path | None = None,
) -> dict[str, Any]:
    cases: dict[str, Any] = {}
    for mode in modes:
        runs = [
            one_run(mode == "persistent", count, seconds, ack_every, ack=ack, profile=profile)
            for _ in range(repeat)
        ]
        rate = median_of(runs, "msgs_per_s")
        idle = median_of(runs, "node_idle_rss")
        peak = max(r["node_peak_rss"] for r in runs)
        cases[mode] = {
            "msgs_per_s": rate,
            "sends_per_s": median_of(runs, "sends_per_s"),
            "target_msgs_per_s": TARGETS[mode],
            "node_idle_rss": idle,
            "node_peak_rss": peak,
            "cpu_seconds_per_100k": {
                part: statistics.median(r["cpu_seconds"][part] / r["delivered"] for r in runs)
                * 100_000
                for part in ("node", "producer", "consumer")
            },
            "runs": runs,
        }
        cpu = cases[mode]["cpu_seconds_per_100k"]
        print(
            f"{mode:15} {rate:>9,.0f} msgs/s end to end (target {TARGETS[mode]:,})   "
            f"sends {cases[mode]['sends_per_s']:,.0f}/s   "
            f"node RSS idle {idle / MIB:.1f} MiB peak {peak / MIB:.1f} MiB   "
            f"CPU s/100k node {cpu['node']:.1f} producer {cpu['producer']:.1f} "
            f"consumer {cpu['consumer']:.1f}",
            flush=True,
        )
    return {"cases": cases}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("producer", "consumer"):
        return _client_main(argv[0], argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks stomp")
    parser.add_argument("--count", type=int, default=100_000, help="messages per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode (median kept)")
    parser.add_argument("--seconds", type=float, default=60.0, help="the producer stops then")
    parser.add_argument("--ack-every", type=int, default=500, help="consumer's cumulative acks")
    parser.add_argument(
        "--ack",
        choices=("client", "auto"),
        default="client",
        help="the consumer's ack mode (auto: as peers-stomp subscribes)",
    )
    parser.add_argument("--mode", choices=MODES, action="append", help="default: both")
    parser.add_argument(
        "--profile", type=Path, help="record the node with py-spy into this folder ([dev] extra)"
    )
    parser.add_argument("--output", type=Path, help="write the JSON here, not to results/")
    args = parser.parse_args(argv)
    if args.count < 1 or args.repeat < 1:
        parser.error("--count and --repeat must be positive")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    try:
        results = run(
            count=args.count,
            repeat=args.repeat,
            seconds=args.seconds,
            ack_every=args.ack_every,
            modes=args.mode or MODES,
            ack=args.ack,
            profile=args.profile,
        )
    except BenchmarkError as error:
        print(f"stomp benchmark failed: {error}", file=sys.stderr)
        return 1
    figures = {
        "count": args.count,
        "repeat": args.repeat,
        "message_bytes": KIB,
        "ack_every": args.ack_every,
        "ack": args.ack,
        "client": f"stomp.py {stomp.__version__}",
        **results,
    }
    path = save("stomp_throughput", figures, args.output)
    print(f"saved {path}")
    return 0


def _client_main(role: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.stomp_throughput {role}")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--size", type=int, default=KIB)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--ack-every", type=int, default=500)
    parser.add_argument("--ack", choices=("client", "auto"), default="client")
    parser.add_argument("--vhost", help="the CONNECT frame's host header")
    parser.add_argument(
        "--tune-allocator",
        action="store_true",
        help="raise glibc's mmap and trim thresholds first, as the project's own clients do",
    )
    args = parser.parse_args(argv)
    if args.tune_allocator and not tune_allocator(CLIENT_MMAP_THRESHOLD, CLIENT_TRIM_THRESHOLD):
        emit("error", message="the allocator's thresholds cannot be set here (glibc only)")
        return 1
    try:
        return producer(args) if role == "producer" else consumer(args)
    except BenchmarkError as error:
        emit("error", message=str(error))
        return 1


if __name__ == "__main__":
    sys.exit(main())
