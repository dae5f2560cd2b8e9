"""Node throughput: one producer and one consumer process through a node process, 1 KiB
messages, durable and non-durable, against the raw socket ceiling.

For each mode and run it starts a fresh node (``txbridge node``, its own data-dir, port 0)
and reads its idle RSS once it has started; then a consumer process
(``benchmarks.node_peers consumer``) and, once that consumes, a producer process. The
figures:

- **messages/s end to end**: messages delivered / (consumer's last receipt - producer's
  first send);
- **confirmed-send latency** p50/p99: per send, from ``send_nowait`` to its confirmation
  callback, under full load (so it includes the wait in the confirmation window);
- **node peak RSS** (VmHWM of the node process before it is stopped) and peak / idle;
- CPU seconds of the node, the producer and the consumer during the run.

With ``--store postgresql`` (by default both stores run) the durable mode runs once more
on a node whose ``[store]`` is the PostgreSQL server ``--postgresql`` (a schema of its own
per run, dropped after), as the case ``durable-postgresql``, with what the database spent:
its server process's CPU and the write-ahead log bytes, per message
(``benchmarks/pg_store.py``).

The **raw ceiling** is ``benchmarks.peers raw-writer``/``raw-reader``, as in the transport
benchmark: plain blocking sockets between two processes moving the same number of 1 KiB
frames one way. Ours / raw is reported per mode.

    python -m benchmarks node [--count 100000] [--repeat 3] [--seconds 60]
                              [--store sqlite|postgresql] [--postgresql URL]

prints a table and writes benchmarks/results/node_throughput.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.pg_store import DEFAULT_SERVER, Costs, bench_store
from benchmarks.runner import ROOT, Event, peers, save

KIB = 1024
MIB = 1024 * 1024
MODES = ("durable", "non-durable")
STORES = ("sqlite", "postgresql")
STARTED = re.compile(r"node (\S+) \((\S+)\) started: (.*)")
BIN = Path(sys.executable).parent
QUEUE = "bench"
TARGETS = {"durable": 25_000, "non-durable": 50_000}
RSS_TARGET = 100 * MIB

NODE_CONFIG = f"""\
[node]
name = "bench"
data-dir = "data"

[[acceptor]]
name = "core"
url = "tcp://127.0.0.1:0"
protocols = ["core"]

[[address]]
name = "{QUEUE}"
routing = "anycast"

[security]
enabled = false
"""


class BenchmarkError(RuntimeError):
    """A process failed, or the run lost, duplicated or reordered messages."""


def proc_status(pid: int, field: str) -> int:
    """A size from /proc/PID/status (``VmHWM``: peak RSS, ``VmRSS``: RSS), in bytes.

    The same source as ``benchmarks.peers.peak_rss``, which reads it for its own process."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise BenchmarkError(f"no {field} in /proc/{pid}/status")


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_faults(pid: int) -> int:
    """Minor page faults process ``pid`` took so far."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[7])


class Child:
    """A child process whose stdout lines a thread reads into a queue (so it never blocks
    on a full pipe); stderr goes to a file, quoted when it fails."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        cwd: Path,
        log: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log = log
        self._stderr = log.open("wb")
        self.process = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT), **(env or {})},
        )
        self.pid = self.process.pid
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.tail.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def describe(self, what: str) -> str:
        self._stderr.flush()
        stderr = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        output = "".join(self.tail)[-3000:]
        return f"{self.name} {what}:\n{output}{stderr}"

    def until(self, pattern: re.Pattern[str] | str, deadline: float) -> re.Match[str]:
        """The first output line matching ``pattern``; fails at ``deadline`` (monotonic)."""
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise BenchmarkError(
                    self.describe(f"gave no {compiled.pattern!r} in time")
                ) from None
            if line is None:
                self.process.wait()
                raise BenchmarkError(
                    self.describe(f"exited ({self.process.returncode}) before {compiled.pattern!r}")
                )
            found = compiled.search(line)
            if found:
                return found

    def event(self, name: str, deadline: float) -> Event:
        """The next JSON event line called ``name`` (an ``error`` event fails)."""
        found = self.until(rf'^\{{"event": "({name}|error)"', deadline)
        event: Event = json.loads(found.string)
        if event["event"] == "error":
            raise BenchmarkError(self.describe(f"failed: {event['message']}"))
        return event

    def tell(self, line: str) -> None:
        if self.process.stdin is not None and self.process.poll() is None:
            try:
                self.process.stdin.write(line + "\n")
                self.process.stdin.flush()
            except BrokenPipeError:
                pass

    def stop(self, sig: int = signal.SIGKILL, timeout: float = 30.0) -> int | None:
        """Send ``sig`` (if still running) and reap; SIGKILL if it does not end in time."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(5)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with suppress(OSError):
                    stream.close()
        self._stderr.close()
        return self.process.returncode


@contextmanager
def children() -> Iterator[ExitStack]:
    """An exit stack whose callbacks kill the children; SIGTERM to this process becomes
    ``SystemExit(143)`` so that they are killed then too."""
    in_main = threading.current_thread() is threading.main_thread()

    def on_sigterm(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, on_sigterm) if in_main else None
    try:
        with ExitStack() as stack:
            yield stack
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def start_node(
    directory: Path,
    stack: ExitStack,
    deadline: float,
    config: str = NODE_CONFIG,
    acceptor: str = "core",
) -> tuple[Child, int]:
    """A node in ``directory`` on ``config``; returns it once started, with the port of
    its ``acceptor``."""
    node, ports = start_node_ports(directory, stack, deadline, config)
    return node, ports[acceptor]


def start_node_ports(
    directory: Path,
    stack: ExitStack,
    deadline: float,
    config: str = NODE_CONFIG,
    options: Sequence[str] = (),
    *,
    prefix: Sequence[str] = (),
) -> tuple[Child, dict[str, int]]:
    """A node in ``directory`` on ``config`` (and ``txbridge node``'s ``options``, the
    command run under ``prefix``, a tool such as valgrind, if any); returns it once
    started, with the port of each of its acceptors, by name."""
    (directory / "node.toml").write_text(config)
    node = Child(
        "the node",
        [*prefix, str(BIN / "txbridge"), "node", "--config", "node.toml", *options],
        directory,
        directory / "node.stderr",
    )
    stack.callback(node.stop)
    started = node.until(STARTED, deadline)
    urls = dict(part.split(" on ") for part in started.group(3).split(", "))
    return node, {name: int(url.rsplit(":", 1)[1]) for name, url in urls.items()}


def role_process(
    module: str, role: str, args: Sequence[str], directory: Path, stack: ExitStack
) -> Child:
    """``python -m MODULE ROLE ARGS``: a benchmark's producer or consumer process."""
    child = Child(
        f"the {role}",
        [sys.executable, "-m", module, role, *args],
        ROOT,
        directory / f"{role}.stderr",
    )
    stack.callback(child.stop)
    return child


def peer(role: str, args: Sequence[str], directory: Path, stack: ExitStack) -> Child:
    return role_process("benchmarks.node_peers", role, args, directory, stack)


@dataclass(frozen=True)
class Clients:
    """How the producer and the consumer are set up."""

    ack_every: int = 500
    confirmation_window: int = MIB
    consumer_window: int = MIB

    def producer_args(self) -> list[str]:
        return ["--window", str(self.confirmation_window)]

    def consumer_args(self) -> list[str]:
        return ["--ack-every", str(self.ack_every), "--window", str(self.consumer_window)]


def ready_consumer(
    url: str, count: int, clients: Clients, *, directory: Path, stack: ExitStack, deadline: float
) -> Child:
    """A consumer process of ``count`` messages on ``url``, once it consumes."""
    consumer = peer(
        "consumer",
        ["--url", url, "--count", str(count), *clients.consumer_args()],
        directory,
        stack,
    )
    consumer.event("ready", deadline)
    return consumer


def produce(
    url: str,
    consumer: Child,
    *,
    durable: bool,
    count: int,
    seconds: float,
    clients: Clients,
    directory: Path,
    stack: ExitStack,
    deadline: float,
) -> tuple[Event, Event, Child]:
    """A producer process sending ``count`` 1 KiB messages to ``url`` (or for ``seconds``)
    with many in flight, until ``consumer`` has every one it sent: the producer's ``done``
    event, the consumer's ``received`` event and the producer."""
    producer = peer(
        "producer",
        [
            "--url",
            url,
            "--count",
            str(count),
            "--seconds",
            str(seconds),
            *(["--durable"] if durable else []),
            *clients.producer_args(),
        ],
        directory,
        stack,
    )
    done = producer.event("done", deadline)
    consumer.tell(f"sent {done['sent']}")
    received = consumer.event("received", deadline)
    return done, received, producer


def load_figures(mode: str, done: Event, received: Event) -> dict[str, Any]:
    """What the producer's ``done`` and the consumer's ``received`` events say of a run:
    counts, messages/s end to end and the confirmed-send latency (``check`` reads them)."""
    elapsed = received["last"] - done["first_send"]
    return {
        "mode": mode,
        "sent": done["sent"],
        "confirmed": done["confirmed"],
        "refused": done["refused"],
        "first_error": done["first_error"],
        "time_bounded": done["time_bounded"],
        "delivered": received["received"],
        "out_of_order": received["out_of_order"],
        "duplicates": received["duplicates"],
        "redelivered": received["redelivered"],
        "seconds": elapsed,
        "msgs_per_s": received["received"] / elapsed if elapsed > 0 else 0.0,
        "confirmed_per_s": done["confirmed"] / (done["last_confirm"] - done["first_send"]),
        "latency_p50_ms": done["latency_p50"] * 1e3,
        "latency_p99_ms": done["latency_p99"] * 1e3,
        "latency_max_ms": done["latency_max"] * 1e3,
        "latency_samples": done["latency_samples"],
    }


def one_run(
    durable: bool,
    count: int,
    seconds: float,
    clients: Clients,
    profile: Path | None,
    *,
    postgresql: str | None = None,
) -> dict[str, Any]:
    """One producer, one consumer, a fresh node (its store on the PostgreSQL server
    ``postgresql`` if given): the figures of that run."""
    mode = "durable" if durable else "non-durable"
    deadline = time.monotonic() + seconds + 120.0  # start-up, draining and stopping
    with tempfile.TemporaryDirectory(prefix="txbridge-node-bench-") as folder, children() as stack:
        directory = Path(folder)
        config, costs = NODE_CONFIG, None
        if postgresql is not None:
            store, costs = stack.enter_context(bench_store(postgresql))
            config += store
        node, port = start_node(directory, stack, deadline, config)
        idle_rss = proc_status(node.pid, "VmRSS")
        url = f"tcp://127.0.0.1:{port}"
        consumer = ready_consumer(
            url, count, clients, directory=directory, stack=stack, deadline=deadline
        )
        spy = None
        if profile is not None:
            spy = _py_spy(node.pid, profile / f"node-{mode}", directory, stack)
        node_cpu = proc_cpu(node.pid)
        if costs is not None:
            costs.start()
        done, received, producer = produce(
            url,
            consumer,
            durable=durable,
            count=count,
            seconds=seconds,
            clients=clients,
            directory=directory,
            stack=stack,
            deadline=deadline,
        )
        node_cpu = proc_cpu(node.pid) - node_cpu
        if costs is not None:
            costs.finish()
        peak_rss = proc_status(node.pid, "VmHWM")
        after_rss = proc_status(node.pid, "VmRSS")
        if spy is not None:
            spy.stop(signal.SIGINT)
        node_exit = node.stop(signal.SIGTERM)
    figures = {
        **load_figures(mode, done, received),
        "store": "sqlite" if costs is None else "postgresql",
        "node_idle_rss": idle_rss,
        "node_peak_rss": peak_rss,
        "node_rss_after": after_rss,
        "node_peak_to_idle": peak_rss / idle_rss,
        "node_exit": node_exit,
        "cpu_seconds": {
            "node": node_cpu,
            "producer": done["cpu"],
            "consumer": received["cpu"],
        },
        "pids": {"node": node.pid, "producer": producer.pid, "consumer": consumer.pid},
        "producer_peak_rss": done["peak_rss"],
        "consumer_peak_rss": received["peak_rss"],
    }
    if costs is not None:
        figures["database"] = _per_message(costs, received["received"])
    check(figures)
    return figures


def _per_message(costs: Costs, delivered: int) -> dict[str, Any]:
    """What the PostgreSQL server spent, in all and per message delivered."""
    figures = dict(costs.figures)
    figures["server_cpu_us_per_msg"] = figures["server_cpu_seconds"] / delivered * 1e6
    figures["wal_bytes_per_msg"] = figures["wal_bytes"] / delivered
    return figures


def _py_spy(pid: int, output: Path, directory: Path, stack: ExitStack) -> Child:
    """py-spy recording the node (a developer's tool: ``pip install -e .[dev]`` installs it)."""
    spy = Child(
        "py-spy",
        [
            str(BIN / "py-spy"),
            "record",
            "--pid",
            str(pid),
            "--rate",
            "250",
            "--nonblocking",  # sampling without stopping the node, which would slow it
            "--format",
            "raw",
            "--output",
            f"{output}.txt",
        ],
        directory,
        directory / "py-spy.stderr",
    )
    stack.callback(spy.stop)
    time.sleep(1.0)  # py-spy attaches asynchronously; a profile only, not a measurement
    return spy


def check(run: dict[str, Any]) -> None:
    """Nothing lost, duplicated, reordered or refused."""
    problems = []
    if run["refused"]:
        problems.append(f"{run['refused']} sends refused (first: {run['first_error']})")
    if run["confirmed"] + run["refused"] != run["sent"]:
        problems.append(f"{run['sent']} sent but {run['confirmed']} confirmed")
    if run["delivered"] != run["confirmed"]:
        problems.append(f"{run['confirmed']} confirmed but {run['delivered']} delivered")
    for key in ("out_of_order", "duplicates", "redelivered"):
        if run[key]:
            problems.append(f"{run[key]} {key.replace('_', ' ')}")
    if problems:
        raise BenchmarkError(f"{run['mode']} run: " + "; ".join(problems))


def raw_ceiling(count: int) -> dict[str, Any]:
    """The transport benchmark's raw case: ``count`` 1 KiB frames over plain sockets."""
    with peers() as start:
        reader = start(["raw-reader", "--url", "tcp://127.0.0.1:0", "--frame-size", str(KIB)])
        port = reader.until("listening")["port"]
        writer = start(
            [
                "raw-writer",
                "--url",
                f"tcp://127.0.0.1:{port}",
                "--bytes",
                str(count * KIB),
                "--frame-size",
                str(KIB),
            ]
        )
        writer.until("done")
        received = reader.until("received")
    elapsed = received["elapsed"]
    return {"seconds": elapsed, "frames_per_s": count / elapsed if elapsed > 0 else 0.0}


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def run(
    *,
    count: int,
    repeat: int,
    seconds: float,
    clients: Clients,
    modes: Sequence[str],
    profile: Path | None,
    stores: Sequence[str] = ("sqlite",),
    postgresql: str = DEFAULT_SERVER,
) -> dict[str, Any]:
    raw_runs = [raw_ceiling(count) for _ in range(repeat)]
    raw = statistics.median(r["frames_per_s"] for r in raw_runs)
    print(f"{'raw sockets':18} {raw:>10,.0f} frames/s (1 KiB, ceiling)", flush=True)
    cases: dict[str, Any] = {}
    plan: list[tuple[str, str | None]] = [
        (mode, None) for mode in modes if "sqlite" in stores or mode != "durable"
    ]
    if "postgresql" in stores and "durable" in modes:
        plan.append(("durable-postgresql", postgresql))
    for case, server in plan:
        mode = case.split("-postgresql")[0]
        runs = [
            one_run(mode == "durable", count, seconds, clients, profile, postgresql=server)
            for _ in range(repeat)
        ]
        rate = median_of(runs, "msgs_per_s")
        peak = max(r["node_peak_rss"] for r in runs)
        idle = median_of(runs, "node_idle_rss")
        cases[case] = {
            "msgs_per_s": rate,
            "target_msgs_per_s": TARGETS[mode],
            "ratio_ours_to_raw": rate / raw,
            "latency_p50_ms": median_of(runs, "latency_p50_ms"),
            "latency_p99_ms": median_of(runs, "latency_p99_ms"),
            "node_idle_rss": idle,
            "node_peak_rss": peak,
            "node_peak_to_idle": peak / idle,
            "cpu_seconds_per_100k": {
                part: statistics.median(r["cpu_seconds"][part] / r["delivered"] for r in runs)
                * 100_000
                for part in ("node", "producer", "consumer")
            },
            "runs": runs,
        }
        if server is not None:
            cases[case]["database_per_msg"] = {
                key: statistics.median(r["database"][key] for r in runs)
                for key in ("server_cpu_us_per_msg", "wal_bytes_per_msg")
            }
        print(
            f"{case:18} {rate:>10,.0f} msgs/s (target {TARGETS[mode]:,})   "
            f"ours/raw {rate / raw:.3f}   "
            f"confirm p50 {cases[case]['latency_p50_ms']:.1f} ms "
            f"p99 {cases[case]['latency_p99_ms']:.1f} ms   "
            f"node RSS idle {idle / MIB:.1f} MiB peak {peak / MIB:.1f} MiB "
            f"({peak / idle:.2f}x)",
            flush=True,
        )
        if server is not None:
            cost = cases[case]["database_per_msg"]
            print(
                f"{'':18} PostgreSQL server process {cost['server_cpu_us_per_msg']:.1f} µs "
                f"CPU and {cost['wal_bytes_per_msg']:,.0f} B of WAL per message",
                flush=True,
            )
    return {"raw": {"frames_per_s": raw, "runs": raw_runs}, "cases": cases}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks node")
    parser.add_argument("--count", type=int, default=100_000, help="messages per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode (median kept)")
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="the producer stops sending after this"
    )
    parser.add_argument("--ack-every", type=int, default=500, help="consumer's cumulative acks")
    parser.add_argument("--confirmation-window", type=int, default=MIB, help="producer's, in bytes")
    parser.add_argument("--consumer-window", type=int, default=MIB, help="in bytes")
    parser.add_argument("--mode", choices=MODES, action="append", help="default: both")
    parser.add_argument(
        "--store",
        choices=STORES,
        action="append",
        help="default: both (postgresql runs the durable mode)",
    )
    parser.add_argument(
        "--postgresql", default=DEFAULT_SERVER, help=f"server URL (default {DEFAULT_SERVER})"
    )
    parser.add_argument("--profile", type=Path, help="record the node with py-spy into this folder")
    parser.add_argument(
        "--output", type=Path, help="write the JSON here, not to benchmarks/results/"
    )
    args = parser.parse_args(argv)
    clients = Clients(args.ack_every, args.confirmation_window, args.consumer_window)
    if args.count < 1 or args.repeat < 1:
        parser.error("--count and --repeat must be positive")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    try:
        results = run(
            count=args.count,
            repeat=args.repeat,
            seconds=args.seconds,
            clients=clients,
            modes=args.mode or MODES,
            profile=args.profile,
            stores=args.store or STORES,
            postgresql=args.postgresql,
        )
    except BenchmarkError as error:
        print(f"node benchmark failed: {error}", file=sys.stderr)
        return 1
    figures = {
        "count": args.count,
        "repeat": args.repeat,
        "message_bytes": KIB,
        "clients": asdict(clients),
        "rss_target": RSS_TARGET,
        **results,
    }
    path = save("node_throughput", figures, args.output)
    print(f"saved {path}")
    return 0
