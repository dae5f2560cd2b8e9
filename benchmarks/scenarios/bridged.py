"""The scenarios through a core bridge: node A -> bridge -> node B, each node its own
process, traced producer processes on A and traced consumer processes on B, event logs in
the run folder, then the audit of it.

    txbridge bench bridge [--out DIR] [--messages N] [--size BYTES] [--producers P]
                          [--consumers C] [--non-durable]
    txbridge bench large  [...] [--rate BYTES_PER_S]   (default 60 messages of 10 MiB)
    txbridge bench faults [...] [--rounds R] [--faults kill-a,drop-bridge,drop-producers]

- **bridge**: node B, then node A whose TOML holds one ``[[bridge]]`` table forwarding its
  queue ``bench`` to B's address ``bench`` (duplicate detection on); ``--producers``
  producers on A send ``--messages`` in all, ``--consumers`` consumers on B share them.
- **large**: the same with file bodies of ``--size`` bytes (streamed in chunks from the
  producer, through A, the bridge and B) and a slow consumer: it takes one message at a
  time and waits size / ``--rate`` after each (default 50 MB/s), so the backlog builds up
  on the nodes, which must stay in bounded memory (their peak RSS is printed).
- **faults**: the bridge scenario with the producers and the bridge connecting through
  port forwarders (``benchmarks.scenarios.proxy``) and faults injected on a schedule:
  ``--rounds`` rounds of the ``--faults`` cycle, spread evenly over the messages received
  (the first when 1 / (faults + 1) of them are in, and so on). ``kill-a``: kill -9 of
  node A, restarted at once on its data-dir (its port changes; its forwarder follows);
  ``drop-bridge``: the bridge's connection to B reset; ``drop-producers``: the producers'
  connections to A reset. Producers reconnect for ever and resend what was unconfirmed,
  each send carrying the duplicate-detection id ``PRODUCER:SEQ``; the bridge resends
  with its own ids, which B's per-bridge cache drops. Each fault is a ``fault-injected``
  event of the process ``runner``. With duplicate detection the audit must find nothing
  lost and nothing duplicated.

The run folder (``--out``, default ``var/bench/KIND-TIME``) receives ``a/`` and ``b/``
(the nodes' folders), each process's stderr, ``events/`` (producers', consumers', the
runner's, and the nodes' RSS sampled by the runner every 0.25 s as ``node-a`` and
``node-b``) and ``report/``. The headline figures and the path of ``report/index.html``
are printed at the end; the exit status is 1 when the audit found a message lost,
unexpected or duplicated.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bridge_throughput import BridgeSettings, bridge_table, node_config
from benchmarks.node_throughput import (
    BenchmarkError,
    Child,
    children,
    proc_status,
    start_node,
)
from benchmarks.runner import ROOT
from benchmarks.scenarios.node import RSSSampler, _events
from bridge import events
from bridge.config.units import parse_size

MIB = 1024 * 1024
FAULTS = ("kill-a", "drop-bridge", "drop-producers")
RECONNECT = 0.2
"""Seconds between a faults-scenario producer's reconnection attempts."""


@dataclass(frozen=True)
class Defaults:
    messages: int
    size: int
    producers: int
    consumers: int
    ack_every: int


DEFAULTS = {
    "bridge": Defaults(20_000, 1024, 2, 2, 500),
    "large": Defaults(60, 10 * MIB, 1, 1, 1),
    "faults": Defaults(20_000, 1024, 2, 1, 500),
}


def parse(kind: str, argv: list[str]) -> argparse.Namespace:
    defaults = DEFAULTS[kind]
    parser = argparse.ArgumentParser(prog=f"txbridge bench {kind}", description=__doc__)
    parser.add_argument("--out", type=Path, help=f"the run folder (var/bench/{kind}-TIME)")
    parser.add_argument("--messages", type=int, default=defaults.messages, help="messages in all")
    parser.add_argument("--size", default=str(defaults.size), help="body bytes (10MiB works)")
    parser.add_argument("--producers", type=int, default=defaults.producers, help="on node A")
    parser.add_argument("--consumers", type=int, default=defaults.consumers, help="on node B")
    parser.add_argument("--non-durable", action="store_true", help="non-durable sends")
    parser.add_argument(
        "--ack-every", type=int, default=defaults.ack_every, help="consumers' cumulative acks"
    )
    parser.add_argument(
        "--idle", type=float, default=20.0, help="end when nothing arrived for this long"
    )
    parser.add_argument("--master", default="local[2]", help="Spark master for the audit")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the run")
    if kind == "large":
        parser.add_argument(
            "--rate", default="50MB", help="the slow consumer's bytes/s (default 50MB)"
        )
    if kind == "faults":
        parser.add_argument("--rounds", type=int, default=2, help="rounds of the fault cycle")
        parser.add_argument("--faults", default=",".join(FAULTS), help="the cycle, in order")
    args = parser.parse_args(argv)
    args.kind = kind
    try:
        args.size = parse_size(args.size)
        args.rate = parse_size(args.rate.replace("MB", "000000")) if kind == "large" else 0
    except ValueError as error:
        parser.error(str(error))
    if args.messages < 1 or args.size < 0 or args.producers < 1 or args.consumers < 1:
        parser.error("--messages, --producers and --consumers must be positive")
    args.cycle = []
    if kind == "faults":
        args.cycle = [name for name in args.faults.split(",") if name]
        if not args.cycle or any(name not in FAULTS for name in args.cycle):
            parser.error(f"--faults takes {','.join(FAULTS)}, got {args.faults!r}")
        if args.non_durable:
            parser.error("the faults scenario sends durable messages (kill -9 loses others)")
    return args


# -- the processes --------------------------------------------------------------------------


class Forwarder:
    """A ``benchmarks.scenarios.proxy`` process in front of a node's port."""

    def __init__(self, name: str, upstream: int, out: Path, stack: ExitStack, deadline: float):
        self.deadline = deadline
        self.child = Child(
            f"the {name} forwarder",
            [sys.executable, "-m", "benchmarks.scenarios.proxy", "--upstream", str(upstream)],
            ROOT,
            out / f"proxy-{name}.stderr",
        )
        stack.callback(self.child.stop)
        self.port = int(self.child.event("listening", deadline)["port"])

    def drop(self) -> int:
        self.child.tell("drop")
        return int(self.child.event("dropped", self.deadline)["connections"])

    def point_at(self, port: int) -> None:
        self.child.tell(f"upstream {port}")
        self.child.event("upstream", self.deadline)


@dataclass
class Nodes:
    """Node B, then node A bridging to it (through a forwarder in the faults scenario)."""

    out: Path
    stack: ExitStack
    deadline: float
    faulty: bool
    a: Child = field(init=False)
    b: Child = field(init=False)
    a_config: str = field(init=False)
    b_port: int = field(init=False)
    producer_port: int = field(init=False)
    to_a: Forwarder | None = None
    to_b: Forwarder | None = None
    peak_a: int = 0

    def __post_init__(self) -> None:
        settings = BridgeSettings(retry_interval="200ms")
        window = settings.acceptor_producer_window
        for name in ("a", "b"):
            (self.out / name).mkdir(parents=True, exist_ok=True)
        b_config = node_config("b", window)
        self.b, self.b_port = start_node(self.out / "b", self.stack, self.deadline, b_config)
        target = self.b_port
        if self.faulty:
            self.to_b = Forwarder("bridge", self.b_port, self.out, self.stack, self.deadline)
            target = self.to_b.port
        bridges = bridge_table(f"tcp://127.0.0.1:{target}", settings)
        self.a_config = node_config("a", window, bridges)
        self.a, a_port = start_node(self.out / "a", self.stack, self.deadline, self.a_config)
        self.producer_port = a_port
        if self.faulty:
            self.to_a = Forwarder("producers", a_port, self.out, self.stack, self.deadline)
            self.producer_port = self.to_a.port

    def a_pid(self) -> int:
        return self.a.pid

    def kill_a(self) -> str:
        """kill -9 node A, start it again on its data-dir, point its forwarder at it."""
        assert self.to_a is not None
        pid = self.a.pid
        self.peak_a = max(self.peak_a, _peak(pid))
        self.a.stop(signal.SIGKILL)
        self.a, port = start_node(self.out / "a", self.stack, self.deadline, self.a_config)
        self.to_a.point_at(port)
        return f"kill -9 of node a (pid {pid}); restarted as pid {self.a.pid}"

    def peaks(self) -> dict[str, int]:
        return {"a": max(self.peak_a, _peak(self.a.pid)), "b": _peak(self.b.pid)}


def _peak(pid: int) -> int:
    try:
        return proc_status(pid, "VmHWM")
    except (OSError, BenchmarkError):
        return 0


def driver(name: str, args: list[str], out: Path) -> Child:
    """A producer or consumer process (``name``: ``producer-0``, ``consumer-1``, ...)."""
    role = name.split("-", 1)[0]
    return Child(
        f"the {name}",
        [sys.executable, "-m", "benchmarks.scenarios.drivers", role, *args],
        ROOT,
        out / f"{name}.stderr",
    )


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (index < total % parts) for index in range(parts)]


def schedule(cycle: list[str], rounds: int, messages: int) -> list[tuple[int, str]]:
    """The faults in order, each with the number of messages received that triggers it."""
    faults = cycle * rounds
    step = messages / (len(faults) + 1)
    return [(max(1, round(step * (index + 1))), name) for index, name in enumerate(faults)]


# -- the run --------------------------------------------------------------------------------


def drive(args: argparse.Namespace, out: Path, run: str) -> dict[str, Any]:
    """Start the nodes and the drivers, inject the faults, show progress until done."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn  # noqa: PLC0415

    deadline = time.monotonic() + args.timeout
    common = ["--run-dir", str(out), "--run", run]
    faulty = args.kind == "faults"
    with children() as stack:
        nodes = Nodes(out, stack, deadline, faulty)
        for name, pid in (("a", nodes.a_pid), ("b", lambda: nodes.b.pid)):
            sampler = RSSSampler(pid, events.EventWriter(out, run, f"node-{name}"), f"node-{name}")
            stack.callback(sampler.stop)
        runner = events.EventWriter(out, run, "runner")  # written to by the faults only
        stack.callback(runner.close)
        b_url = f"tcp://127.0.0.1:{nodes.b_port}"
        consumers = []
        for index in range(args.consumers):
            consumer = driver(
                f"consumer-{index}",
                [
                    "--url", b_url, *common, "--name", f"consumer-{index}",
                    "--ack-every", str(args.ack_every),
                    *(["--rate", str(args.rate)] if args.rate else []),
                ],
                out,
            )  # fmt: skip
            stack.callback(consumer.stop)
            consumers.append(consumer)
        for consumer in consumers:
            consumer.event("ready", deadline)
        a_url = f"tcp://127.0.0.1:{nodes.producer_port}"
        producers = []
        for index, count in enumerate(_split(args.messages, args.producers)):
            producer = driver(
                f"producer-{index}",
                [
                    "--url", a_url, *common, "--name", f"producer-{index}",
                    "--count", str(count), "--size", str(args.size),
                    *(["--non-durable"] if args.non_durable else []),
                    *(["--large"] if args.kind == "large" else []),
                    *(["--duplicate-ids", "--reconnect", str(RECONNECT)] if faulty else []),
                ],
                out,
            )  # fmt: skip
            stack.callback(producer.stop)
            producers.append(producer)
        faults = schedule(args.cycle, args.rounds, args.messages) if faulty else []
        injected: list[str] = []
        sent: dict[int, int] = {}
        received = [0] * len(consumers)
        last_progress = time.monotonic()
        with Progress(
            *Progress.get_default_columns()[:1], BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), transient=True,
        ) as bar:  # fmt: skip
            task = bar.add_task("received", total=args.messages)
            while True:
                now = time.monotonic()
                if now > deadline:
                    raise BenchmarkError(f"the run took more than {args.timeout:.0f} s")
                for index, producer in enumerate(producers):
                    if index not in sent:
                        for event in _events(producer):
                            if event["event"] == "done":
                                sent[index] = event["sent"]
                for index, consumer in enumerate(consumers):
                    for event in _events(consumer):
                        if event["event"] == "progress" and event["received"] > received[index]:
                            received[index] = event["received"]
                            last_progress = now
                total = sum(received)
                bar.update(task, completed=total)
                if faults and total >= faults[0][0]:
                    _, fault = faults.pop(0)
                    detail = inject(fault, nodes)
                    runner.record(events.FAULT_INJECTED, node="a", detail=detail)
                    injected.append(detail)
                    bar.console.print(f"{time.strftime('%H:%M:%S')}  fault: {detail}")
                    last_progress = time.monotonic()
                everything = total >= sum(sent.values()) or now - last_progress > args.idle
                if len(sent) == len(producers) and not faults and everything:
                    break
                time.sleep(0.05)
        finished = []
        for consumer in consumers:
            consumer.tell("stop")
        for consumer in consumers:
            finished.append(consumer.event("done", deadline))
        for child in (*producers, *consumers):
            child.process.wait(timeout=30)
        peaks = nodes.peaks()
        nodes.a.stop(signal.SIGTERM)
        nodes.b.stop(signal.SIGTERM)
    return {
        "sent": sum(sent.values()),
        "received": sum(event["received"] for event in finished),
        "faults": injected,
        "node_peak_rss": peaks,
    }


def inject(fault: str, nodes: Nodes) -> str:
    if fault == "kill-a":
        return nodes.kill_a()
    forwarder = nodes.to_b if fault == "drop-bridge" else nodes.to_a
    assert forwarder is not None
    dropped = forwarder.drop()
    whose = "the bridge's connection to b" if fault == "drop-bridge" else "the producers' to a"
    return f"dropped {dropped} connection(s): {whose}"


def main(kind: str, argv: list[str]) -> int:
    args = parse(kind, argv)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    run = f"{kind}-{stamp}"
    out = args.out or ROOT / "var" / "bench" / run
    if (out / events.EVENTS_DIR).exists():
        print(f"{out} already holds event logs: pick another --out", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    what = f"{args.messages:,} messages of {args.size:,} bytes"
    print(
        f"{kind} scenario: {what}, {args.producers} producer(s) on node a -> bridge -> node b, "
        f"{args.consumers} consumer(s) on node b; run folder {out}"
    )
    if kind == "large":
        print(f"  the consumer is slow: {args.rate / 1e6:,.0f} MB/s")
    started = time.monotonic()
    try:
        figures = drive(args, out, run)
    except BenchmarkError as error:
        print(f"the {kind} scenario failed: {error}", file=sys.stderr)
        return 1
    print(
        f"run: {figures['sent']:,} sent, {figures['received']:,} received in "
        f"{time.monotonic() - started:.1f} s; peak RSS node a "
        f"{figures['node_peak_rss']['a'] / MIB:.1f} MiB, node b "
        f"{figures['node_peak_rss']['b'] / MIB:.1f} MiB"
    )
    if figures["faults"]:
        print(f"faults injected: {len(figures['faults'])}")
    return audit(out, args.master)


def audit(out: Path, master: str) -> int:
    """Audit the run folder, print the headline; 1 if anything was lost or duplicated."""
    from bridge.audit.cli import audit_folder, print_headline  # noqa: PLC0415
    from bridge.audit.read import AuditError  # noqa: PLC0415

    try:
        report, report_dir = audit_folder(out, out / "report", master=master)
    except AuditError as error:
        print(f"the audit failed: {error}", file=sys.stderr)
        return 1
    print_headline(report, report_dir)
    delivery = report["delivery"]
    return 1 if delivery["lost"] or delivery["unexpected"] or delivery["duplicated"] else 0


def bridge_main(argv: list[str]) -> int:
    return main("bridge", argv)


def large_main(argv: list[str]) -> int:
    return main("large", argv)


def faults_main(argv: list[str]) -> int:
    return main("faults", argv)
