"""The ``node`` scenario: one node process, one traced producer and one traced consumer
process, event logs in the run folder, then the audit of it.

    txbridge bench node [--out DIR] [--messages N] [--size BYTES] [--non-durable]

The run folder (``--out``, default ``var/bench/node-TIME``) receives the node's folder,
each process's stderr, ``events/`` (the producer's and consumer's logs, and the node's RSS
sampled by this process every 0.25 s) and ``report/`` (the audit). The headline figures
and the path of ``report/index.html`` are printed at the end. The exit status is 1 when
the audit found a message lost, unexpected or duplicated.
"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.node_throughput import BenchmarkError, Child, children, proc_status, start_node
from benchmarks.runner import ROOT
from bridge import events

RSS_EVERY = 0.25
NODE_PROCESS = "node"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="txbridge bench node", description=__doc__)
    parser.add_argument("--out", type=Path, help="the run folder (var/bench/node-TIME)")
    parser.add_argument("--messages", type=int, default=20_000, help="messages to send")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--non-durable", action="store_true", help="non-durable sends")
    parser.add_argument("--ack-every", type=int, default=500, help="consumer's cumulative acks")
    parser.add_argument("--master", default="local[2]", help="Spark master for the audit")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the run")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.size < 0:
        parser.error("--messages must be positive and --size not negative")
    return args


class RSSSampler:
    """Samples a process's RSS from /proc into an event writer, on a thread of its own.

    ``pid`` is the process id, or a function giving the current one (a node that a fault
    scenario restarts): then a process that ended is not the end of the sampling."""

    def __init__(
        self, pid: int | Callable[[], int], writer: events.EventWriter, node: str = NODE_PROCESS
    ) -> None:
        self.pid = pid
        self.node = node
        self.writer = writer
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                rss = proc_status(self.pid() if callable(self.pid) else self.pid, "VmRSS")
            except (OSError, BenchmarkError):
                if not callable(self.pid):
                    return  # the process ended
            else:
                self.writer.record(events.RSS_SAMPLE, size=rss, node=self.node)
            self.stopped.wait(RSS_EVERY)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.writer.close()


def driver(role: str, args: list[str], out: Path) -> Child:
    return Child(
        f"the {role}",
        [sys.executable, "-m", "benchmarks.scenarios.drivers", role, *args],
        ROOT,
        out / f"{role}.stderr",
    )


def _events(child: Child) -> list[dict[str, Any]]:
    """The JSON event lines ``child`` printed since the last call (an error raises). That
    it ended raises too, but only once what it printed before is handled: a producer that
    prints ``done`` and exits between two calls has done its part."""
    found: list[dict[str, Any]] = []
    while True:
        try:
            line = child.lines.get_nowait()
        except queue.Empty:
            return found
        if line is None:
            if found:
                child.lines.put(None)  # the end, for the next call (if there is one)
                return found
            child.process.wait()
            raise BenchmarkError(child.describe(f"exited ({child.process.returncode})"))
        if line.startswith("{"):
            event = json.loads(line)
            if event["event"] == "error":
                raise BenchmarkError(child.describe(f"failed: {event['message']}"))
            found.append(event)


def drive(args: argparse.Namespace, out: Path, run: str) -> dict[str, Any]:
    """Start the node and the drivers, show progress until the consumer is done."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn  # noqa: PLC0415

    deadline = time.monotonic() + args.timeout
    common = ["--run-dir", str(out), "--run", run]
    with children() as stack:
        node_dir = out / NODE_PROCESS
        node_dir.mkdir(parents=True, exist_ok=True)
        node, port = start_node(node_dir, stack, deadline)
        sampler = RSSSampler(node.pid, events.EventWriter(out, run, NODE_PROCESS))
        stack.callback(sampler.stop)
        url = f"tcp://127.0.0.1:{port}"
        consumer = driver(
            "consumer",
            ["--url", url, *common, "--name", "consumer-0", "--ack-every", str(args.ack_every)],
            out,
        )
        stack.callback(consumer.stop)
        consumer.event("ready", deadline)
        producer = driver(
            "producer",
            [
                "--url", url, *common, "--name", "producer-0",
                "--count", str(args.messages), "--size", str(args.size),
                *(["--non-durable"] if args.non_durable else []),
            ],
            out,
        )  # fmt: skip
        stack.callback(producer.stop)
        sent: dict[str, Any] | None = None
        received: dict[str, Any] | None = None
        with Progress(
            *Progress.get_default_columns()[:1], BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), transient=True,
        ) as bar:  # fmt: skip
            task = bar.add_task("received", total=args.messages)
            while received is None:
                if time.monotonic() > deadline:
                    raise BenchmarkError(f"the run took more than {args.timeout:.0f} s")
                if sent is None:
                    for event in _events(producer):
                        if event["event"] == "done":
                            sent = event
                            consumer.tell(f"sent {event['sent']}")
                for event in _events(consumer):
                    if event["event"] == "progress":
                        bar.update(task, completed=event["received"])
                    elif event["event"] == "done":
                        received = event
                time.sleep(0.05)
        for child in (producer, consumer):
            child.process.wait(timeout=30)
        node_peak = proc_status(node.pid, "VmHWM")
        node.stop(signal.SIGTERM)
    assert sent is not None
    return {"sent": sent, "received": received, "node_peak_rss": node_peak}


def main(argv: list[str]) -> int:
    args = parse(argv)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    run = f"node-{stamp}"
    out = args.out or ROOT / "var" / "bench" / run
    if (out / events.EVENTS_DIR).exists():
        print(f"{out} already holds event logs: pick another --out", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    print(f"node scenario: {args.messages:,} messages of {args.size:,} bytes, run folder {out}")
    try:
        drive(args, out, run)
    except BenchmarkError as error:
        print(f"the node scenario failed: {error}", file=sys.stderr)
        return 1
    from bridge.audit.cli import audit_folder, print_headline  # noqa: PLC0415
    from bridge.audit.read import AuditError  # noqa: PLC0415

    try:
        report, report_dir = audit_folder(out, out / "report", master=args.master)
    except AuditError as error:
        print(f"the audit failed: {error}", file=sys.stderr)
        return 1
    print_headline(report, report_dir)
    delivery = report["delivery"]
    return 1 if delivery["lost"] or delivery["unexpected"] or delivery["duplicated"] else 0
