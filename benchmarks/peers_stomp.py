"""STOMP against the peers: the same stomp.py producer and consumer processes against a
txbridge node, a private RabbitMQ node and a private ActiveMQ Classic broker, brokers
interleaved round by round, ours / best peer per case.

The cases (``--cases``):

- **persistent** / **non-persistent**: one broker, 1 KiB messages;
- **a-to-b-persistent**: two brokers, produce on A, consume on B, 1 KiB persistent
  messages moved by txbridge's core bridge, a RabbitMQ shovel
  (``benchmarks.rabbitmq``) or an ActiveMQ network connector (``benchmarks.activemq``);
- **a-to-b-large**: the same with ``--large-count`` persistent messages of
  ``--large-size`` (100 x 10 MiB).

Every broker runs at its defaults (txbridge's STOMP acceptor at its default
``max-frame-size`` unless ``--txbridge-max-frame-size``), fresh for each run, on
127.0.0.1 ports chosen free. A run: the consumer (``benchmarks.stomp_throughput
consumer``) subscribes to ``/queue/bench`` with ``ack:auto`` and the broker's default
prefetch; once it has its receipt, the producer (``... producer``) sends every message
(``persistent:true`` in the persistent cases) with a receipt on the last one. The
figures: **msgs/s** (MB/s, 10^6 bytes, for large messages) end to end = delivered /
(the consumer's last MESSAGE - the producer's first SEND); each broker's **peak RSS**
(VmHWM, summed over its processes: both nodes in the A -> B cases) and **CPU seconds**
(its processes, from the consumer's subscription to its last message). A run that loses,
duplicates or reorders messages, or fails, is recorded with its reason; the medians are
of the runs that did not fail. A peer that is not installed is skipped, and said so.

The **relay** (``benchmarks.stomp_relay``, one, or two for A -> B) runs in the same
rounds as the ceiling: it passes each SEND on as it reads it and stores nothing, so no
broker passes its rate with these clients on this machine. Each row gives ours / the
relay's rate, and says whether the goal's rate is under the relay's.

    python -m benchmarks peers-stomp [--count 100000] [--repeat 3] [--cases ...]
                                     [--brokers txbridge,rabbitmq,activemq,relay]

prints a table, then one of what bounds each row (each side's CPU, the cores kept busy,
the rate that CPU per message allows, the clients' ceiling), and writes
benchmarks/results/peers_stomp.json (``--output`` elsewhere).
"""

from __future__ import annotations

import argparse
import os
import pstats
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import stomp

from benchmarks import activemq, rabbitmq
from benchmarks.bridge_throughput import BridgeSettings, bridge_table
from benchmarks.node_throughput import (
    BenchmarkError,
    Child,
    _py_spy,
    children,
    proc_cpu,
    proc_faults,
    proc_status,
    role_process,
    start_node_ports,
)
from benchmarks.runner import ROOT, save
from bridge.config.units import parse_size

KIB = 1024
MIB = 1024 * 1024
MB = 1_000_000
BROKERS = ("txbridge", "rabbitmq", "activemq", "relay")
PEERS = ("rabbitmq", "activemq")
CEILING = "relay"
"""``benchmarks.stomp_relay``: not a peer but the ceiling, a relay that stores nothing."""
RATIO_GOAL = 1.5
RSS_GOAL = 1 / 3
CLIENTS = ("producer", "consumer")
FAULTS = ("broker", *CLIENTS)
BOUNDS = ("cpu_bound_rate", "machine_busy", "client_ceiling")
"""What ``bounds`` works out for a run (medians in a broker's summary)."""
PACKAGES = {"rabbitmq": "rabbitmq-server", "activemq": "activemq"}


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    bridged: bool
    persistent: bool
    large: bool = False


CASES = {
    case.name: case
    for case in (
        Case("persistent", "one node, persistent", bridged=False, persistent=True),
        Case("non-persistent", "one node, non-persistent", bridged=False, persistent=False),
        Case("a-to-b-persistent", "A -> B, persistent", bridged=True, persistent=True),
        Case(
            "a-to-b-large", "A -> B, {large} persistent", bridged=True, persistent=True, large=True
        ),
    )
}


@dataclass
class Deployment:
    """Where the producer and the consumer connect, and the broker's processes."""

    produce_port: int
    consume_port: int
    pids: dict[str, int]
    stops: list[Callable[[], object]] = field(default_factory=list)
    vhost: str | None = None
    profiles: dict[str, Path] = field(default_factory=dict)
    """By process: the cProfile statistics each writes as it stops (``--count-calls``)."""
    traces: dict[str, Path] = field(default_factory=dict)
    """By process: the callgrind output each writes as it stops (``--callgrind``)."""


@dataclass(frozen=True)
class Options:
    """What every run sends, and how long it may send."""

    count: int
    large_count: int
    large_size: int
    seconds: float
    txbridge_max_frame_size: str | None
    profile: Path | None = None
    """Record txbridge's processes with py-spy into this folder (a profile, not a figure)."""
    duplicate_detection: bool = True
    """txbridge's core bridge with ``use-duplicate-detection`` (its default)."""
    block: str | None = None
    """txbridge's ``bench`` address with this ``max-size-bytes`` under ``BLOCK``: producer
    flow control, the address's memory bounded (a variant; by default it has no limit)."""
    count_calls: bool = False
    """Run txbridge's nodes under cProfile, for the calls each makes per message (their
    rates are then not figures)."""
    callgrind: Path | None = None
    """Run txbridge's nodes under valgrind's callgrind, its outputs in this folder, for
    the instructions each executes (their rates are then not figures)."""
    tuned_clients: bool = False
    """The stomp.py clients with glibc's mmap and trim thresholds raised (a variant): by
    default they run as a user's would, with glibc's own."""


# -- the brokers ----------------------------------------------------------------------------


def txbridge_config(name: str, options: Options, core: bool = False) -> str:
    """A node with a STOMP acceptor (and a core one for a bridge to reach), address
    ``bench`` anycast (under ``BLOCK`` at ``options.block``, if given), security off."""
    max_frame_size = options.txbridge_max_frame_size
    frame = f'max-frame-size = "{max_frame_size}"\n' if max_frame_size else ""
    block = (
        f'max-size-bytes = "{options.block}"\naddress-full-policy = "BLOCK"\n'
        if options.block
        else ""
    )
    core_acceptor = (
        '\n[[acceptor]]\nname = "core"\nurl = "tcp://127.0.0.1:0"\nprotocols = ["core"]\n'
        if core
        else ""
    )
    return f"""\
[node]
name = "{name}"
data-dir = "data"

[[acceptor]]
name = "stomp"
url = "tcp://127.0.0.1:0"
protocols = ["stomp"]
{frame}{core_acceptor}
[[address]]
name = "bench"
routing = "anycast"
{block}
[security]
enabled = false
"""


def deploy_txbridge(
    case: Case, directory: Path, stack: ExitStack, deadline: float, options: Options
) -> Deployment:
    """One node; or node B, then node A with a core bridge of its queue to B."""
    profiled = ["--profile", PROFILE] if options.count_calls else []
    traces: dict[str, Path] = {}

    def traced(name: str) -> list[str]:
        """The command's prefix that runs node ``name`` under callgrind, if wanted."""
        if options.callgrind is None:
            return []
        trace = traces[name] = options.callgrind / f"{case.name}-{name.replace(' ', '-')}.out"
        return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={trace}"]

    if not case.bridged:
        node, ports = start_node_ports(
            directory,
            stack,
            deadline,
            txbridge_config("one", options),
            profiled,
            prefix=traced("node"),
        )
        return Deployment(
            ports["stomp"],
            ports["stomp"],
            {"node": node.pid},
            [lambda: node.stop(signal.SIGTERM, STOPPING)],
            profiles={"node": directory / PROFILE} if profiled else {},
            traces=traces,
        )
    (directory / "a").mkdir()
    (directory / "b").mkdir()
    b, b_ports = start_node_ports(
        directory / "b",
        stack,
        deadline,
        txbridge_config("b", options, core=True),
        profiled,
        prefix=traced("node B"),
    )
    settings = BridgeSettings(duplicate_detection=options.duplicate_detection)
    if options.block:
        # under BLOCK, the window is at most the address's max-size-bytes (bridges.md)
        window = min(settings.confirmation_window, parse_size(options.block))
        settings = replace(settings, confirmation_window=window)
    bridge = bridge_table(f"tcp://127.0.0.1:{b_ports['core']}", settings)
    a, a_ports = start_node_ports(
        directory / "a",
        stack,
        deadline,
        txbridge_config("a", options) + bridge,
        profiled,
        prefix=traced("node A"),
    )
    return Deployment(
        a_ports["stomp"],
        b_ports["stomp"],
        {"node A": a.pid, "node B": b.pid},
        [lambda: a.stop(signal.SIGTERM, STOPPING), lambda: b.stop(signal.SIGTERM, STOPPING)],
        profiles=(
            {"node A": directory / "a" / PROFILE, "node B": directory / "b" / PROFILE}
            if profiled
            else {}
        ),
        traces=traces,
    )


PROFILE = "calls.pstats"
"""Where a node run with ``--count-calls`` writes its statistics, in its folder."""

STOPPING = 120.0
"""Seconds a node has to stop once told (SIGTERM): one under callgrind writes its
output then."""


def instructions(traces: dict[str, Path]) -> dict[str, int]:
    """By process, the instructions its callgrind output counts (start-up and stopping
    included: two runs of different counts give those per message)."""
    counted = {}
    for name, path in traces.items():
        if not path.exists():
            raise RuntimeError(f"{name} wrote no callgrind output to {path}")
        totals = re.search(r"^totals: (\d+)", path.read_text(errors="replace"), re.MULTILINE)
        if totals is None:
            raise RuntimeError(f"{path} has no totals line")
        counted[name] = int(totals.group(1))
    return counted


def calls_per_message(profiles: dict[str, Path], messages: int) -> dict[str, dict[str, float]]:
    """By process, the calls its statistics count per message delivered: of Python
    functions, and in all (C functions too). Start-up and stopping are counted with the
    run: at 100,000 messages they add about one call per message."""
    calls = {}
    for name, path in profiles.items():
        if not path.exists():
            raise RuntimeError(f"{name} wrote no statistics to {path}")
        stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
        python = sum(entry[1] for (file, _, _), entry in stats.items() if file != "~")
        every = sum(entry[1] for entry in stats.values())
        calls[name] = {"python": python / max(messages, 1), "all": every / max(messages, 1)}
    return calls


def deploy_rabbitmq(
    case: Case, directory: Path, stack: ExitStack, deadline: float, options: Options
) -> Deployment:
    """One private node; or node B, then node A shovelling its queue to B."""
    epmd = rabbitmq.start_epmd(directory, stack, deadline)
    if not case.bridged:
        node = rabbitmq.start_node("one", directory / "one", stack, deadline, epmd)
        return Deployment(
            node.stomp_port, node.stomp_port, {"node": node.pid}, [node.stop], rabbitmq.VHOST
        )
    b = rabbitmq.start_node("b", directory / "b", stack, deadline, epmd)
    a = rabbitmq.start_node(
        "a", directory / "a", stack, deadline, epmd, advanced=rabbitmq.shovel_config(b.amqp_port)
    )
    b.script.until(rabbitmq.SHOVEL_CONNECTED, deadline)
    return Deployment(
        a.stomp_port,
        b.stomp_port,
        {"node A": a.pid, "node B": b.pid},
        [a.stop, b.stop],
        rabbitmq.VHOST,
    )


def deploy_activemq(
    case: Case, directory: Path, stack: ExitStack, deadline: float, options: Options
) -> Deployment:
    """One private broker; or broker B, then broker A with a network connector to B."""
    if not case.bridged:
        broker = activemq.start_broker("one", directory / "one", stack, deadline)
        return Deployment(
            broker.stomp_port,
            broker.stomp_port,
            {"broker": broker.pid},
            [lambda: broker.process.stop(signal.SIGTERM)],
        )
    b = activemq.start_broker("b", directory / "b", stack, deadline)
    a = activemq.start_broker("a", directory / "a", stack, deadline, network_to=b.openwire_port)
    a.process.until(activemq.BRIDGED, deadline)
    return Deployment(
        a.stomp_port,
        b.stomp_port,
        {"broker A": a.pid, "broker B": b.pid},
        [lambda: a.process.stop(signal.SIGTERM), lambda: b.process.stop(signal.SIGTERM)],
    )


def deploy_relay(
    case: Case, directory: Path, stack: ExitStack, deadline: float, options: Options
) -> Deployment:
    """One relay; or relay B, then relay A passing every SEND on to it."""

    def start(name: str, *forward: str) -> tuple[Child, int]:
        argv = [sys.executable, "-m", "benchmarks.stomp_relay", *forward]
        relay = Child(f"the {name}", argv, ROOT, directory / f"{name}.stderr")
        stack.callback(relay.stop)
        return relay, relay.event("listening", deadline)["port"]

    if not case.bridged:
        relay, port = start("relay")
        return Deployment(port, port, {"relay": relay.pid}, [relay.stop])
    b, b_port = start("relay-b")
    a, a_port = start("relay-a", "--forward", str(b_port))
    return Deployment(a_port, b_port, {"relay A": a.pid, "relay B": b.pid}, [a.stop, b.stop])


DEPLOY = {
    "txbridge": deploy_txbridge,
    "rabbitmq": deploy_rabbitmq,
    "activemq": deploy_activemq,
    "relay": deploy_relay,
}
MISSING: dict[str, Callable[[], str | None]] = {
    "txbridge": lambda: None,
    "rabbitmq": rabbitmq.missing,
    "activemq": activemq.missing,
    "relay": lambda: None,
}


def version(broker: str) -> str:
    """The installed version of a peer's Debian package (ours and the relay's: the
    package's)."""
    if broker in ("txbridge", CEILING):
        from importlib.metadata import version as package_version  # noqa: PLC0415

        return package_version("txbridge")
    found = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", PACKAGES[broker]],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() or "unknown"


# -- one run --------------------------------------------------------------------------------


def one_run(broker: str, case: Case, options: Options) -> dict[str, Any]:
    """Fresh brokers, one consumer, one producer: the figures of that run."""
    count = options.large_count if case.large else options.count
    size = options.large_size if case.large else KIB
    deadline = time.monotonic() + options.seconds + 180.0  # start-up, draining, stopping
    with (
        tempfile.TemporaryDirectory(prefix=f"txbridge-peers-{broker}-") as folder,
        children() as stack,
    ):
        directory = Path(folder)
        deployment = DEPLOY[broker](case, directory, stack, deadline, options)
        pids = deployment.pids
        idle = sum(proc_status(pid, "VmRSS") for pid in pids.values())
        common = ["--count", str(count), "--seconds", str(options.seconds), "--size", str(size)]
        if deployment.vhost is not None:
            common += ["--vhost", deployment.vhost]
        if options.tuned_clients:
            common.append("--tune-allocator")
        consumer = role_process(
            "benchmarks.stomp_throughput",
            "consumer",
            ["--port", str(deployment.consume_port), *common, "--ack", "auto"],
            directory,
            stack,
        )
        consumer.event("ready", deadline)
        spies = []
        if options.profile is not None and broker == "txbridge":
            for name, pid in pids.items():
                output = options.profile / f"{case.name}-{name.replace(' ', '-')}"
                spies.append(_py_spy(pid, output, directory, stack))
        cpu = {name: proc_cpu(pid) for name, pid in pids.items()}
        faults = {name: proc_faults(pid) for name, pid in pids.items()}
        producer = role_process(
            "benchmarks.stomp_throughput",
            "producer",
            [
                "--port",
                str(deployment.produce_port),
                *common,
                *(["--persistent"] if case.persistent else []),
            ],
            directory,
            stack,
        )
        done = producer.event("done", deadline)
        consumer.tell(f"sent {done['sent']}")
        received = consumer.event("received", deadline)
        cpu = {name: proc_cpu(pid) - cpu[name] for name, pid in pids.items()}
        faults = {name: proc_faults(pid) - faults[name] for name, pid in pids.items()}
        for spy in spies:
            spy.stop(signal.SIGINT)
        peaks = {name: proc_status(pid, "VmHWM") for name, pid in pids.items()}
        for stop in deployment.stops:
            stop()
        calls = calls_per_message(deployment.profiles, received["received"])
        counted = instructions(deployment.traces)
    elapsed = received["last"] - done["first_send"]
    delivered = received["received"]
    figures = {
        "broker": broker,
        "case": case.name,
        "count": count,
        "size": size,
        "sent": done["sent"],
        "time_bounded": done["time_bounded"],
        "delivered": delivered,
        "out_of_order": received["out_of_order"],
        "duplicates": received["duplicates"],
        "redelivered": received["redelivered"],
        "wrong_size": received["wrong_size"],
        "seconds": elapsed,
        "msgs_per_s": delivered / elapsed if elapsed > 0 else 0.0,
        "mb_per_s": delivered * size / MB / elapsed if elapsed > 0 else 0.0,
        "idle_rss": idle,
        "peak_rss": sum(peaks.values()),
        "peak_rss_by_process": peaks,
        "cpu_seconds": sum(cpu.values()),
        "cpu_seconds_by_process": cpu,
        "client_cpu_seconds": {"producer": done["cpu"], "consumer": received["cpu"]},
        "page_faults_by_process": {
            **faults,
            "producer": done["faults"],
            "consumer": received["faults"],
        },
        "pids": {**pids, "producer": producer.pid, "consumer": consumer.pid},
    }
    figures.update(
        bounds(
            delivered,
            elapsed,
            figures["cpu_seconds"],
            (done["cpu"], received["cpu"]),
            size / MB if case.large else 1.0,
        )
    )
    if calls:
        figures["calls_per_message_by_process"] = calls
    if counted:
        figures["instructions_by_process"] = counted
    problems = []
    if figures["wrong_size"]:
        problems.append(f"{figures['wrong_size']} bodies not of {size} bytes")
    problems += [
        f"{figures[key]} {key.replace('_', ' ')}"
        for key in ("out_of_order", "duplicates", "redelivered")
        if figures[key]
    ]
    if delivered != done["sent"]:
        problems.append(f"{done['sent']} sent but {delivered} delivered")
    if problems:
        figures["error"] = "; ".join(problems)
    return figures


def bounds(
    delivered: int,
    elapsed: float,
    broker_cpu: float,
    client_cpu: tuple[float, float],
    unit: float,
    *,
    cores: int | None = None,
) -> dict[str, float]:
    """What a run's rate is bounded by, in the row's unit (``unit``: 1 per message, or the
    MB a message holds). ``cpu_bound_rate``: the rate at which the CPU every process of
    the run took per message (broker and both clients) would keep every core busy;
    ``machine_busy``: the share of the cores the run kept busy (near 1, the row is bounded
    by CPU per message); ``client_ceiling``: the rate at which the busier stomp.py client
    alone would fill a core (its Python runs on one at a time, under the GIL), which no
    broker can pass with these clients."""
    cores = cores or os.cpu_count() or 1
    every = broker_cpu + sum(client_cpu)
    busiest = max(client_cpu)
    return {
        "cpu_bound_rate": delivered * unit * cores / every if every > 0 else 0.0,
        "machine_busy": every / (cores * elapsed) if elapsed > 0 else 0.0,
        "client_ceiling": delivered * unit / busiest if busiest > 0 else 0.0,
    }


def guarded_run(broker: str, case: Case, options: Options) -> dict[str, Any]:
    """``one_run``, or the reason it failed (a broker refusing or running out of memory
    is a result too). A run that lost, duplicated or reordered messages keeps its figures
    beside its ``error``."""
    try:
        return one_run(broker, case, options)
    except BenchmarkError as error:
        return {"broker": broker, "case": case.name, "error": str(error)}


# -- the benchmark --------------------------------------------------------------------------


def summary(case: Case, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of a broker's runs of a case that did not fail, and the failures' reasons."""
    good = [r for r in runs if "error" not in r]
    result: dict[str, Any] = {"runs": runs, "failed": len(runs) - len(good)}
    if not good:
        result["error"] = runs[0]["error"] if runs else "not run"
        return result
    rate_key = "mb_per_s" if case.large else "msgs_per_s"
    result.update(
        rate=statistics.median(r[rate_key] for r in good),
        unit="MB/s" if case.large else "msgs/s",
        msgs_per_s=statistics.median(r["msgs_per_s"] for r in good),
        peak_rss=max(r["peak_rss"] for r in good),
        cpu_seconds=statistics.median(r["cpu_seconds"] for r in good),
        cpu_seconds_per_100k=statistics.median(
            r["cpu_seconds"] / r["delivered"] * 100_000 for r in good
        ),
        time_bounded=sum(r["time_bounded"] for r in good),
    )
    if all("cpu_bound_rate" in r for r in good):
        result.update(
            {key: statistics.median(r[key] for r in good) for key in BOUNDS},
            client_cpu_seconds={
                client: statistics.median(r["client_cpu_seconds"][client] for r in good)
                for client in CLIENTS
            },
            client_cpu_seconds_per_100k={
                client: statistics.median(
                    r["client_cpu_seconds"][client] / r["delivered"] * 100_000 for r in good
                )
                for client in CLIENTS
            },
        )
    if all("page_faults_by_process" in r for r in good):
        faults = [(_faults(r["page_faults_by_process"]), r["delivered"]) for r in good]
        result.update(
            page_faults={
                side: statistics.median(each[side] for each, _ in faults) for side in FAULTS
            },
            page_faults_per_100k={
                side: statistics.median(each[side] / n * 100_000 for each, n in faults)
                for side in FAULTS
            },
        )
    return result


def _faults(by_process: dict[str, int]) -> dict[str, int]:
    """A run's page faults: the broker's processes together, and each client's."""
    broker = sum(count for name, count in by_process.items() if name not in CLIENTS)
    return {"broker": broker, **{client: by_process[client] for client in CLIENTS}}


def compare(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Ours / the best peer (the fastest that did not fail), in rate and in peak RSS; and
    ours / the relay's rate, the ceiling, with whether the goal's rate is under it."""
    ours = results.get("txbridge", {})
    peers = {b: results[b] for b in PEERS if "rate" in results.get(b, {})}
    ceiling = results.get(CEILING, {}).get("rate")
    compared: dict[str, Any] = {
        "best_peer": max(peers, key=lambda b: peers[b]["rate"]) if peers else None
    }
    if ceiling is not None:
        compared["ceiling"] = ceiling
        if "rate" in ours:
            compared["ceiling_ratio"] = ours["rate"] / ceiling
    if not peers or "rate" not in ours:
        return compared
    best = compared["best_peer"]
    ratio = ours["rate"] / peers[best]["rate"]
    rss_ratio = ours["peak_rss"] / peers[best]["peak_rss"]
    compared.update(
        ratio=ratio,
        rss_ratio=rss_ratio,
        goal_met=ratio >= RATIO_GOAL and rss_ratio <= RSS_GOAL,
        goal_rate=RATIO_GOAL * peers[best]["rate"],
    )
    if ceiling is not None:
        compared["goal_under_ceiling"] = compared["goal_rate"] <= ceiling
    return compared


def cell(result: dict[str, Any]) -> str:
    if "rate" not in result:
        return f"failed: {first_line(result.get('error', ''))}"
    notes = [f"{result['failed']} of {len(result['runs'])} failed"] if result["failed"] else []
    if result["time_bounded"]:
        notes.append(f"{result['time_bounded']} stopped by --seconds")
    cpu = (
        f"{result['cpu_seconds']:.1f} CPU s"
        if result["unit"] == "MB/s"
        else f"{result['cpu_seconds_per_100k']:.1f} CPU s/100k"
    )
    note = f" ({'; '.join(notes)})" if notes else ""
    return (
        f"{result['rate']:,.0f} {result['unit']}, {result['peak_rss'] / MIB:,.0f} MiB, {cpu}{note}"
    )


def bounds_cells(result: dict[str, Any]) -> list[str]:
    """A broker's bounds for ``print_bounds``: its CPU by process, the share of the cores
    its runs kept busy, the rate its CPU per message allows, the clients' ceiling, and the
    page faults by process (fresh memory each process touched)."""
    if "cpu_bound_rate" not in result:
        return ["-"] * 5
    unit = result["unit"]
    per = "" if unit == "MB/s" else "_per_100k"  # (a large case: per run, as ``cell``)
    broker = result[f"cpu_seconds{per}"]
    clients = result[f"client_cpu_seconds{per}"]
    return [
        f"{broker:.1f} / {clients['producer']:.1f} / {clients['consumer']:.1f}",
        f"{result['machine_busy']:.0%}",
        f"{result['cpu_bound_rate']:,.0f} {unit}",
        f"{result['client_ceiling']:,.0f} {unit}",
        " / ".join(f"{result[f'page_faults{per}'][side]:,.0f}" for side in FAULTS)
        if f"page_faults{per}" in result
        else "-",
    ]


def print_bounds(report: dict[str, Any], brokers: Sequence[str]) -> None:
    """What bounds each row, per broker: the rate the goal asks of us, and what the CPU
    per message and the clients allow."""
    header = [
        "case",
        "broker",
        "rate",
        "CPU s: broker / producer / consumer",
        "cores busy",
        "CPU-bound rate",
        "client ceiling",
        "page faults: broker / producer / consumer",
    ]
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for case in report.values():
        title = case["title"]
        if "goal_rate" in case:
            unit = case["brokers"]["txbridge"]["unit"]
            title += f" (goal {case['goal_rate']:,.0f} {unit})"
        for broker in brokers:
            result = case["brokers"][broker]
            rate = f"{result['rate']:,.0f} {result['unit']}" if "rate" in result else "failed"
            print("| " + " | ".join([title, broker, rate, *bounds_cells(result)]) + " |")
            title = ""


def first_line(text: str, limit: int = 200) -> str:
    """The first line of a failure's reason (a broker's ERROR, say), cut to ``limit``."""
    lines = [line.strip() for line in text.replace("\\n", "\n").splitlines() if line.strip()]
    return lines[0][:limit] if lines else ""


def run(
    *,
    cases: Sequence[Case],
    brokers: Sequence[str],
    repeat: int,
    options: Options,
    after_round: Callable[[dict[str, Any], int], object] = lambda report, rounds: None,
) -> dict[str, Any]:
    """Every case, every round, every broker in turn (the order rotating each round);
    ``after_round`` gets the report so far after each round (to save it: a long run
    stopped half-way keeps its finished rounds)."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        case.name: {broker: [] for broker in brokers} for case in cases
    }
    report: dict[str, Any] = {}
    for round_number in range(repeat):
        order = [*brokers[round_number % len(brokers) :], *brokers[: round_number % len(brokers)]]
        for case in cases:
            for broker in order:
                result = guarded_run(broker, case, options)
                runs[case.name][broker].append(result)
                shown = cell(summary(case, [result]))
                print(f"round {round_number + 1} {case.name:18} {broker:9} {shown}", flush=True)
                for name, calls in result.get("calls_per_message_by_process", {}).items():
                    print(
                        f"    {name}: {calls['python']:.1f} Python calls per message "
                        f"({calls['all']:.1f} with C functions)",
                        flush=True,
                    )
                for name, counted in result.get("instructions_by_process", {}).items():
                    print(f"    {name}: {counted:,} instructions (callgrind)", flush=True)
        report = {case.name: case_report(case, runs[case.name], options) for case in cases}
        after_round(report, round_number + 1)
    return report


def case_report(
    case: Case, runs: dict[str, list[dict[str, Any]]], options: Options
) -> dict[str, Any]:
    """A case's summary per broker and ours / best peer."""
    results = {broker: summary(case, broker_runs) for broker, broker_runs in runs.items()}
    title = case.title.format(large=f"{options.large_count} x {size_text(options.large_size)}")
    return {"title": title, "brokers": results, **compare(results)}


def size_text(size: int) -> str:
    """``10 MiB`` for 10485760, ``1536 bytes`` for what is not a whole KiB or MiB."""
    for unit, name in ((MIB, "MiB"), (KIB, "KiB")):
        if size >= unit and not size % unit:
            return f"{size // unit} {name}"
    return f"{size} bytes"


def print_table(report: dict[str, Any], brokers: Sequence[str]) -> None:
    """The figures as a Markdown table, as docs/benchmarks.md shows them."""
    relay = CEILING in brokers
    header = ["case", *brokers, "ours / best peer", "RSS ours / best peer"]
    if relay:
        header += ["ours / relay", "goal under the relay"]
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for case in report.values():
        ratio = f"{case['ratio']:.2f}" if "ratio" in case else "-"
        rss = f"{case['rss_ratio']:.2f}" if "rss_ratio" in case else "-"
        cells = [cell(case["brokers"][broker]) for broker in brokers] + [ratio, rss]
        if relay:
            cells += [
                f"{case['ceiling_ratio']:.2f}" if "ceiling_ratio" in case else "-",
                {True: "yes", False: "no"}.get(case.get("goal_under_ceiling"), "-"),
            ]
        print("| " + " | ".join([case["title"], *cells]) + " |", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks peers-stomp")
    parser.add_argument("--count", type=int, default=100_000, help="1 KiB messages per run")
    parser.add_argument("--large-count", type=int, default=100, help="large messages per run")
    parser.add_argument("--large-size", default="10MiB", help="body of a large message")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (medians kept)")
    parser.add_argument("--seconds", type=float, default=60.0, help="the producer stops then")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated")
    parser.add_argument("--brokers", default=",".join(BROKERS), help="comma-separated")
    parser.add_argument(
        "--txbridge-max-frame-size", help="the STOMP acceptors' max-frame-size (default: theirs)"
    )
    parser.add_argument("--output", type=Path, help="write the JSON here, not to results/")
    parser.add_argument(
        "--profile", type=Path, help="record txbridge's nodes with py-spy here ([dev] extra)"
    )
    parser.add_argument(
        "--txbridge-no-duplicate-detection",
        action="store_true",
        help="txbridge's core bridge with use-duplicate-detection = false: a resend after a "
        "crash is delivered again, as through a shovel (a variant, saved apart)",
    )
    parser.add_argument(
        "--txbridge-block",
        metavar="SIZE",
        help="txbridge's address with max-size-bytes = SIZE under address-full-policy BLOCK: "
        "a producer waits while the address holds that much (a variant, saved apart)",
    )
    parser.add_argument(
        "--tuned-clients",
        action="store_true",
        help="the stomp.py clients with glibc's mmap and trim thresholds raised, as the "
        "project's own benchmark clients run (a variant, saved apart)",
    )
    parser.add_argument(
        "--count-calls",
        action="store_true",
        help="run txbridge's nodes under cProfile and print the calls each makes per "
        "message (a count, not a rate)",
    )
    parser.add_argument(
        "--callgrind",
        type=Path,
        help="run txbridge's nodes under valgrind's callgrind, its outputs in this folder, "
        "and print the instructions each executes (a count, not a rate)",
    )
    args = parser.parse_args(argv)
    wanted = [name for name in args.brokers.split(",") if name]
    case_names = [name for name in args.cases.split(",") if name]
    unknown = [name for name in wanted if name not in BROKERS] + [
        name for name in case_names if name not in CASES
    ]
    if unknown:
        parser.error(
            f"unknown broker or case: {', '.join(unknown)}"
            f" (brokers: {', '.join(BROKERS)}; cases: {', '.join(CASES)})"
        )
    cases = [CASES[name] for name in case_names]
    if not cases or not wanted:
        parser.error("--cases and --brokers each name at least one")
    if args.count < 1 or args.large_count < 1 or args.repeat < 1:
        parser.error("--count, --large-count and --repeat must be positive")
    if args.txbridge_block is not None:
        try:
            parse_size(args.txbridge_block)
        except ValueError as error:
            parser.error(f"--txbridge-block: {error}")
    options = Options(
        count=args.count,
        large_count=args.large_count,
        large_size=parse_size(args.large_size),
        seconds=args.seconds,
        txbridge_max_frame_size=args.txbridge_max_frame_size,
        profile=args.profile,
        duplicate_detection=not args.txbridge_no_duplicate_detection,
        block=args.txbridge_block,
        count_calls=args.count_calls,
        callgrind=args.callgrind,
        tuned_clients=args.tuned_clients,
    )
    for folder in (args.profile, args.callgrind):
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
    skipped = {name: reason for name in wanted if (reason := MISSING[name]())}
    for name, reason in skipped.items():
        print(f"skipping {name}: {reason}", flush=True)
    brokers = [name for name in BROKERS if name in wanted and name not in skipped]
    if not brokers:
        print("no broker to run", file=sys.stderr)
        return 1
    load_before = os.getloadavg()

    def save_report(report: dict[str, Any], rounds: int) -> Path:
        figures = {
            "count": args.count,
            "large_count": args.large_count,
            "large_size": options.large_size,
            "repeat": args.repeat,
            "rounds_done": rounds,
            "seconds": args.seconds,
            "txbridge_max_frame_size": args.txbridge_max_frame_size,
            "client": f"stomp.py {stomp.__version__}",
            "versions": {name: version(name) for name in brokers},
            "skipped": skipped,
            "load_average": {"before": load_before, "after": os.getloadavg()},
            "goal": {"ratio": RATIO_GOAL, "rss_ratio": RSS_GOAL},
            "txbridge_duplicate_detection": options.duplicate_detection,
            "txbridge_block": options.block,
            "tuned_clients": options.tuned_clients,
            "count_calls": args.count_calls,
            "callgrind": args.callgrind is not None,
            "cases": report,
        }
        # (a counting run's rates are not figures, and a variant is not the table's:
        # neither replaces the table's JSON)
        name = (
            "peers_stomp_calls"
            if args.count_calls
            else "peers_stomp_instructions"
            if args.callgrind is not None
            else "peers_stomp"
            + ("" if options.duplicate_detection else "_no_duplicate_detection")
            + ("_block" if options.block else "")
            + ("_tuned_clients" if options.tuned_clients else "")
        )
        return save(name, figures, args.output)

    report = run(
        cases=cases, brokers=brokers, repeat=args.repeat, options=options, after_round=save_report
    )
    print_table(report, brokers)
    print_bounds(report, brokers)
    print(f"saved {save_report(report, args.repeat)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
