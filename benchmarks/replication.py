"""``python -m benchmarks replication``: what HA replication costs and gives.

Two nodes with ``[ha]`` replication (docs/ha.md): each its own SQLite store, node a
``replication-primary`` and node b ``replication-backup``, each naming the other's core
port as its peer; the lease lives in a new PostgreSQL schema per pair (dropped
afterwards). The failover part's pairs have ``lease-reap-time`` 2 s, ``lease-ping-time``
0.5 s and ``lease-query-timeout`` 0.25 s, as the failover benchmark's first case; the
other parts' the node's defaults (5 s, 1 s, 0.5 s): with the fast ones, on a machine
shared with other work, a live node busy filling its store lost its lease now and then
(its renewals timed out), which is not what the throughput or the copy should measure. A
backup counts as in sync once it logged so, its live node logged so, and the lease names
it (the live node names it there after it logged; only then may it take over). In one
run:

1. **Throughput**: durable 1 KiB messages through node a, measured as the node benchmark
   does (``benchmarks.node_throughput``: a consumer process, then a producer process with
   many sends in flight, ``--count`` messages or ``--seconds``), without a backup (a
   ``replication-primary`` alone) and with its backup in sync (every confirmation waits
   for the backup's acknowledgement), a fresh pair per run, the two alternating for
   ``--repeat`` rounds: the medians of msgs/s and of the confirm latency p50/p99, and the
   ratio replicated / unreplicated (goal: 0.6 or more). A replicated run whose backup
   dropped out of sync fails the benchmark.
2. **Failover**: once the backup is in sync, at a random point of the live node's renewal
   period, the live node is killed with SIGKILL; a blocking core client tries the
   backup's own core port every 10 ms (``benchmarks.failover.first_confirmed_send``) and
   sends one durable message: the seconds from the kill to its confirmation. The killed
   node is started again (its store is stale: it copies the new live node's) and, once in
   sync, is the next one killed, so the pair alternates; ``--kills`` kills, p50 and max.
3. **Failover by a quorum vote**: as 2, but the pair has no lease: three voter nodes
   (plain nodes with ``[cluster]``) are its ``[cluster] members``, and the backup takes
   over once two of them say the live node is gone (docs/ha.md, "Quorum vote"); the
   backup asks at once when its link drops, so no lease has to expire. ``--kills`` kills,
   p50 and max (goal: ``QUORUM_GOAL`` s). ``--only quorum`` runs this part alone.
4. **Initial sync**: node a alone is filled with ``--sync-mb`` MB (10^6 bytes) of durable
   message bodies: ``--large-share`` of them (by bytes) in 1 MiB messages sent with
   ``min_large_message_size`` 100 KiB, so stored as body files, the rest in 1 KiB
   messages (rows of the SQLite file); then node b starts. The figure is the store's bytes
   on node a (its SQLite file and its large-messages folder; the write-ahead log, shown
   apart, holds pages of the file again) over the seconds from b's start to its "in sync"
   log line; also over the live node's own figure (from b's announcement to b's
   confirmation of the copy, which it logs). Should the live node lose its lease meanwhile
   (it stops serving, the copy starts over once it serves again), the run says so, and
   gives up at the third time.
5. **Failback**: a pair on the failover part's lease timings whose primary, a, has
   ``allow-failback``: once b is in sync a is killed with SIGKILL, b takes over, and a is
   started again; it copies b's store, b names it in sync and hands the lease over, and a
   blocking client sends one durable message to a once it logged LIVE. The seconds from
   a's process start, and from b's "a is in sync" line (the handover alone), to a's LIVE
   line and to that send's confirmation (log stamps and the wall clock, one machine);
   b copies from a again before the next of ``--kills`` rounds; p50 and max.
   ``--only failback`` runs this part alone.

The CPU seconds of each node process (and of the producer and consumer) are read from
/proc for each part. Prints tables and writes benchmarks/results/replication.json.

    python -m benchmarks replication [--repeat 3] [--count 50000] [--kills 3]
                                     [--sync-mb 1024] [--large-share 0.25]
                                     [--only quorum|failback]
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.failover import RETRY, START, first_confirmed_send, percentiles, start
from benchmarks.node_throughput import (
    KIB,
    MIB,
    QUEUE,
    STARTED,
    BenchmarkError,
    Child,
    Clients,
    check,
    children,
    load_figures,
    peer,
    proc_cpu,
    produce,
    ready_consumer,
)
from benchmarks.pg_store import DEFAULT_SERVER, bench_schema
from benchmarks.runner import free_port, save
from bridge.client import blocking
from bridge.config.ha import DEFAULT_PING, DEFAULT_QUERY_TIMEOUT, DEFAULT_REAP
from bridge.ctl.logs import TIME_FORMAT
from bridge.ha.lease import TABLE
from bridge.store.large import LARGE_MESSAGES
from bridge.store.sqlite import FILENAME

MB = 1_000_000
PING, REAP, QUERY_TIMEOUT = 0.5, 2.0, 0.25
"""The failover part's lease timings, as benchmarks/failover.py's first case."""


@dataclass(frozen=True)
class Lease:
    """``lease-ping-time``, ``lease-reap-time``, ``lease-query-timeout``, in seconds."""

    ping: float
    reap: float
    query_timeout: float


FAST = Lease(PING, REAP, QUERY_TIMEOUT)
DEFAULTS = Lease(DEFAULT_PING, DEFAULT_REAP, DEFAULT_QUERY_TIMEOUT)
"""The other parts' (the node's defaults): on this shared machine, under the fill's load,
a live node with the fast timings lost its lease now and then."""
RATIO_GOAL = 0.6
"""Replicated msgs/s over unreplicated msgs/s, at least."""
LARGE = MIB
"""The size of the initial sync's large messages."""
LARGE_THRESHOLD = 100 * KIB
"""The filling client's ``min_large_message_size``: a 1 MiB body is a large message."""
QUORUM_GOAL = 2.0
"""Seconds from the kill -9 of the live node to the first confirmed send on its backup,
at most, with a quorum vote."""
QUORUM_VOTE_WAIT = 2.0
"""The quorum part's ``quorum-vote-wait``: the vote's bound, not its usual length (a dead
node's port refuses at once)."""
OUT_OF_SYNC = re.compile(r"replication: (backup \S+ is gone|\S+ did not confirm|a batch failed)")
"""What the live node logs when its backup drops out of sync."""


def _node_text(name: str, port: int, *, queue: bool = True, tables: str = "") -> str:
    """A node with one core acceptor, security off, the benchmark's queue, and ``tables``
    (TOML) after."""
    address = f'\n[[address]]\nname = "{QUEUE}"\nrouting = "anycast"\n' if queue else ""
    return f"""\
[node]
name = "{name}"
data-dir = "data"

[[acceptor]]
name = "core"
url = "tcp://127.0.0.1:{port}"
protocols = ["core"]
{address}
[security]
enabled = false

{tables}"""


def _pair_ha(
    name: str, peer_port: int, ping: float, reap: float, query_timeout: float, *, failback: bool
) -> str:
    """``failback``: node a, the primary, has ``allow-failback``."""
    policy = "replication-primary" if name == "a" else "replication-backup"
    allow = "allow-failback = true\n" if failback and name == "a" else ""
    return f"""\
[ha]
policy = "{policy}"
peers = ["tcp://127.0.0.1:{peer_port}"]
cluster-user = "cluster"
lease-ping-time = "{round(ping * 1000)}ms"
lease-reap-time = "{round(reap * 1000)}ms"
lease-query-timeout = "{round(query_timeout * 1000)}ms"
{allow}"""


def _voters(members: list[str], store: str = "") -> str:
    """``[cluster]``: the voters as its members (``store``: the store a backup serves)."""
    listed = ", ".join(f'"{member}"' for member in members)
    named = f'store = "{store}"\n' if store else ""
    return f'[cluster]\nname = "voters"\nuser = "cluster"\nmembers = [{listed}]\n{named}'


def node_config(
    name: str, port: int, peer_port: int, lease_url: str, lease: Lease, *, failback: bool = False
) -> str:
    ha = _pair_ha(name, peer_port, lease.ping, lease.reap, lease.query_timeout, failback=failback)
    return _node_text(name, port, tables=ha + f'lease-url = "{lease_url}"\n')


def voter_config(name: str, port: int, members: list[str]) -> str:
    """A plain node that votes: a member of the pairs' cluster."""
    return _node_text(name, port, queue=False, tables=_voters(members))


def quorum_config(name: str, port: int, peer_port: int, members: list[str]) -> str:
    """A node of a pair without a lease: the voters are its ``[cluster] members``, and
    both name the pair's store, the primary's."""
    ha = _pair_ha(name, peer_port, PING, REAP, QUERY_TIMEOUT, failback=False)
    ha += f'quorum-vote-wait = "{round(QUORUM_VOTE_WAIT * 1000)}ms"\n\n'
    return _node_text(name, port, tables=ha + _voters(members, "a"))


@dataclass
class Pair:
    """The nodes of one pair: their configurations, ports and processes (by name)."""

    root: Path
    stack: ExitStack
    lease_url: str
    lease: Lease
    ports: dict[str, int]
    nodes: dict[str, Child]
    failback: bool = False
    """Node a, the primary, has ``allow-failback``."""

    def url(self, name: str) -> str:
        return f"tcp://127.0.0.1:{self.ports[name]}"

    def start(self, name: str) -> Child:
        other = "b" if name == "a" else "a"
        config = node_config(
            name,
            self.ports[name],
            self.ports[other],
            self.lease_url,
            self.lease,
            failback=self.failback,
        )
        self.nodes[name] = start(name, config, self.root, self.stack)
        return self.nodes[name]

    def first_live(self) -> Child:
        """Node a, the first live node of the pair, once it serves."""
        node = self.start("a")
        deadline = time.monotonic() + START
        node.until(STARTED, deadline)
        node.until(r"node a: LIVE, epoch 1", deadline)
        return node

    def in_sync(self, live: str, backup: str, deadline: float) -> float:
        """Wait until ``backup`` is in sync with ``live`` and the lease names it; the live
        node's own figure of the copy's seconds."""
        self.nodes[backup].until(rf"replica: in sync with {live}\b", deadline)
        return self.live_in_sync(live, backup, deadline)

    def live_in_sync(self, live: str, backup: str, deadline: float) -> float:
        found = self.nodes[live].until(
            rf"replication: {backup}/\S+ is in sync \(([\d.]+) s\)", deadline
        )
        named_in_sync(self.lease_url, backup, deadline)
        return float(found.group(1))

    def data(self, name: str) -> Path:
        return self.root / name / "data"


@contextmanager
def pair(
    server: str, root: Path, lease: Lease = DEFAULTS, failback: bool = False
) -> Iterator[Pair]:
    """A pair on a new lease schema; its nodes are killed on the way out."""
    with children() as stack, bench_schema(server) as (_name, lease_url):
        ports = {"a": free_port(), "b": free_port()}
        yield Pair(root, stack, lease_url, lease, ports, {}, failback)


def named_in_sync(lease_url: str, backup: str, deadline: float) -> None:
    """Once the lease names ``backup`` in sync (polled every ``RETRY`` s, until
    ``deadline``)."""
    with psycopg.connect(lease_url, autocommit=True) as lease:
        while True:
            row = lease.execute(f"SELECT replica FROM {TABLE}").fetchone()
            if row is not None and str(row[0]).split("/")[0] == backup:
                return
            if time.monotonic() >= deadline:
                raise BenchmarkError(f"the lease does not name {backup} in sync: {row}")
            time.sleep(RETRY)


def logged_since(node: Child) -> list[str]:
    """The output lines ``node`` printed and nobody read yet."""
    lines: list[str] = []
    while True:
        try:
            line = node.lines.get_nowait()
        except queue.Empty:
            return lines
        if line is None:
            node.lines.put(None)
            return lines
        lines.append(line)


def cpu_of(processes: dict[str, Child]) -> dict[str, float]:
    return {name: proc_cpu(child.pid) for name, child in processes.items()}


# -- 1. throughput -------------------------------------------------------------------------


def throughput_run(
    replicated: bool, count: int, seconds: float, clients: Clients, server: str
) -> dict[str, Any]:
    """One producer and one consumer through node a, with its backup in sync or alone."""
    case = "replicated" if replicated else "unreplicated"
    with (
        tempfile.TemporaryDirectory(prefix="txbridge-replication-") as folder,
        pair(server, Path(folder)) as nodes,
    ):
        live = nodes.first_live()
        if replicated:
            nodes.start("b")
            nodes.in_sync("a", "b", time.monotonic() + START)
        deadline = time.monotonic() + seconds + 120.0  # draining and stopping
        url = nodes.url("a")
        root, stack = nodes.root, nodes.stack
        consumer = ready_consumer(
            url, count, clients, directory=root, stack=stack, deadline=deadline
        )
        before = cpu_of(nodes.nodes)
        done, received, _producer = produce(
            url,
            consumer,
            durable=True,
            count=count,
            seconds=seconds,
            clients=clients,
            directory=root,
            stack=stack,
            deadline=deadline,
        )
        after = cpu_of(nodes.nodes)
        dropped = [line for line in logged_since(live) if OUT_OF_SYNC.search(line)]
        if replicated and dropped:
            raise BenchmarkError(f"the backup dropped out of sync during the run: {dropped}")
        if live.process.poll() is not None:
            raise BenchmarkError(live.describe("ended during the run"))
        for node in nodes.nodes.values():
            node.stop(signal.SIGTERM)
    figures = {
        **load_figures("durable", done, received),
        "case": case,
        "cpu_seconds": {
            **{f"node {name}": after[name] - before[name] for name in after},
            "producer": done["cpu"],
            "consumer": received["cpu"],
        },
    }
    check(figures)
    return figures


def throughput(
    count: int, seconds: float, repeat: int, clients: Clients, server: str
) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"unreplicated": [], "replicated": []}
    for round_ in range(repeat):
        for case, done in runs.items():
            figures = throughput_run(case == "replicated", count, seconds, clients, server)
            done.append(figures)
            cpu = figures["cpu_seconds"]
            print(
                f"  {case:12} run {round_ + 1}/{repeat}: {figures['msgs_per_s']:>8,.0f} msgs/s, "
                f"confirm p50 {figures['latency_p50_ms']:.1f} ms "
                f"p99 {figures['latency_p99_ms']:.1f} ms; CPU s "
                + ", ".join(f"{part} {value:.1f}" for part, value in cpu.items()),
                flush=True,
            )
    cases = {
        case: {
            key: statistics.median(run[key] for run in done)
            for key in ("msgs_per_s", "latency_p50_ms", "latency_p99_ms")
        }
        | {
            "cpu_seconds_per_100k": {
                part: statistics.median(run["cpu_seconds"][part] / run["delivered"] for run in done)
                * 100_000
                for part in done[0]["cpu_seconds"]
            }
        }
        for case, done in runs.items()
    }
    ratio = cases["replicated"]["msgs_per_s"] / cases["unreplicated"]["msgs_per_s"]
    return {
        "count": count,
        "repeat": repeat,
        "message_bytes": KIB,
        "clients": asdict(clients),
        "cases": cases,
        "ratio_replicated_to_unreplicated": ratio,
        "goal_ratio": RATIO_GOAL,
        "lease": asdict(DEFAULTS),
        "runs": runs,
    }


# -- 2. failover ---------------------------------------------------------------------------


def kills_run(kills: int, server: str) -> dict[str, Any]:
    """``kills`` kill -9s of the live node of a pair, each once its backup is in sync."""
    seconds: list[float] = []
    copies: list[float] = []
    cpu: list[dict[str, float]] = []
    with (
        tempfile.TemporaryDirectory(prefix="txbridge-replication-") as folder,
        pair(server, Path(folder), FAST) as nodes,
    ):
        nodes.first_live()
        nodes.start("b")
        copies.append(nodes.in_sync("a", "b", time.monotonic() + START))
        phases = random.Random(kills)
        live, backup = "a", "b"
        for kill in range(kills):
            # as in benchmarks/failover.py: anywhere in the live node's renewal period
            time.sleep(phases.uniform(0.0, PING))
            cpu.append(cpu_of(nodes.nodes))
            killed = time.monotonic()
            nodes.nodes[live].stop(signal.SIGKILL)
            confirmed = first_confirmed_send(
                nodes.ports[backup], killed + REAP + PING + START, QUEUE
            )
            seconds.append(confirmed - killed)
            print(f"  kill {kill + 1}/{kills} of {live}: {seconds[-1]:.3f} s", flush=True)
            nodes.nodes[backup].until(rf"node {backup}: LIVE", time.monotonic() + START)
            if kill + 1 < kills:
                nodes.start(live)  # its store is stale: it copies the new live node's
                copies.append(nodes.in_sync(backup, live, time.monotonic() + START))
                live, backup = backup, live
    return {
        "kills": kills,
        "reap_s": REAP,
        "ping_s": PING,
        "query_timeout_s": QUERY_TIMEOUT,
        "goal_s": REAP + PING,
        "retry_interval_s": RETRY,
        "seconds": seconds,
        **percentiles(seconds),
        "copy_seconds_before_each_kill": copies,
        "node_cpu_seconds_at_each_kill": cpu,
    }


# -- 3. failover by a quorum vote ---------------------------------------------------------


def quorum_kills_run(kills: int) -> dict[str, Any]:
    """``kills`` kill -9s of the live node of a pair without a lease, each once its backup
    is in sync; three voter nodes decide."""
    seconds: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="txbridge-replication-") as folder,
        children() as stack,
    ):
        root = Path(folder)
        voter_ports = [free_port() for _ in range(3)]
        members = [f"tcp://127.0.0.1:{port}" for port in voter_ports]
        for number, port in enumerate(voter_ports, 1):
            voter = start(f"v{number}", voter_config(f"v{number}", port, members), root, stack)
            voter.until(STARTED, time.monotonic() + START)
        ports = {"a": free_port(), "b": free_port()}
        nodes: dict[str, Child] = {}

        def launch(name: str) -> Child:
            other = "b" if name == "a" else "a"
            config = quorum_config(name, ports[name], ports[other], members)
            nodes[name] = start(name, config, root, stack)
            return nodes[name]

        launch("a").until(r"node a: LIVE, epoch 1", time.monotonic() + START)
        launch("b").until(r"replica: in sync with a\b", time.monotonic() + START)
        phases = random.Random(kills)
        live, backup = "a", "b"
        for kill in range(kills):
            time.sleep(phases.uniform(0.0, PING))
            killed = time.monotonic()
            nodes[live].stop(signal.SIGKILL)
            confirmed = first_confirmed_send(ports[backup], killed + START, QUEUE)
            seconds.append(confirmed - killed)
            print(f"  kill {kill + 1}/{kills} of {live}: {seconds[-1]:.3f} s", flush=True)
            nodes[backup].until(rf"node {backup}: LIVE", time.monotonic() + START)
            if kill + 1 < kills:
                # its store is stale: the voters refuse it, and it copies the new live node's
                launch(live).until(rf"replica: in sync with {backup}\b", time.monotonic() + START)
                live, backup = backup, live
    return {
        "kills": kills,
        "voters": 3,
        "quorum_size": 2,
        "ping_s": PING,
        "quorum_vote_wait_s": QUORUM_VOTE_WAIT,
        "goal_s": QUORUM_GOAL,
        "retry_interval_s": RETRY,
        "seconds": seconds,
        **percentiles(seconds),
    }


def report_quorum(quorum: dict[str, Any]) -> None:
    print(
        f"kill -9 of the live node to the first confirmed send on its backup, by a quorum "
        f"vote ({quorum['kills']} kills; 3 voters, quorum 2): p50 {quorum['p50']:.2f} s, max "
        f"{quorum['max']:.2f} s (goal {quorum['goal_s']:g} s)"
    )


# -- 4. initial sync -----------------------------------------------------------------------


def folder_bytes(folder: Path) -> tuple[int, int]:
    """Bytes and files under ``folder`` (none if it is missing)."""
    files = [path for path in folder.rglob("*") if path.is_file()] if folder.is_dir() else []
    return sum(path.stat().st_size for path in files), len(files)


def store_bytes(data: Path) -> dict[str, int]:
    """What a node's store holds on disk, by part."""
    wal = data / f"{FILENAME}-wal"
    large, files = folder_bytes(data / LARGE_MESSAGES)
    return {
        "sqlite_file": (data / FILENAME).stat().st_size,
        "sqlite_wal": wal.stat().st_size if wal.exists() else 0,
        "large_messages": large,
        "large_files": files,
    }


def fill(url: str, small: int, large: int, seconds: float, nodes: Pair) -> dict[str, Any]:
    """``small`` durable 1 KiB messages (a producer process, many in flight), then ``large``
    1 MiB ones (confirmed one by one); for at most ``seconds``."""
    started = time.monotonic()
    deadline = started + seconds
    producer = peer(
        "producer",
        ["--url", url, "--count", str(small), "--seconds", str(seconds), "--durable"],
        nodes.root,
        nodes.stack,
    )
    done = producer.event("done", deadline + 60.0)
    if done["refused"] or done["confirmed"] != done["sent"]:
        raise BenchmarkError(f"filling: {done['sent']} sent, {done['confirmed']} confirmed")
    body = os.urandom(LARGE)
    sent_large = 0
    with blocking.connect(url, min_large_message_size=LARGE_THRESHOLD, timeout=60.0) as client:
        while sent_large < large and time.monotonic() < deadline:
            client.send(QUEUE, body, durable=True)
            sent_large += 1
    return {
        "small_messages": done["confirmed"],
        "large_messages": sent_large,
        "body_bytes": done["confirmed"] * KIB + sent_large * LARGE,
        "seconds": time.monotonic() - started,
    }


COPY_SENT = re.compile(r"replication: copy sent to b/\S+ \((\d+) bytes\)")
LIVE_IN_SYNC = re.compile(r"replication: b/\S+ is in sync \(([\d.]+) s\)")
ANNOUNCED = re.compile(r"replication: backup b/\S+ announced")
STOPS_SERVING = re.compile(r"node a: stops serving")
BACKUP_IN_SYNC = re.compile(r"replica: in sync with a\b")
MAX_STOPS = 3
"""Times the live node may stop serving during a copy (it lost the lease) before the run
gives up on it."""


def copy_watched(live: Child, backup: Child, deadline: float) -> list[str]:
    """Until ``backup`` logs that it is in sync: the lines ``live`` logged meanwhile. Fails
    at ``deadline``, or once the live node stopped serving ``MAX_STOPS`` times (each time
    the copy starts over once it serves again)."""
    lines: list[str] = []
    while True:
        try:
            line = backup.lines.get(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
        except queue.Empty:
            line = ""
        if line is None:
            backup.process.wait()
            raise BenchmarkError(backup.describe(f"exited ({backup.process.returncode})"))
        if BACKUP_IN_SYNC.search(line):
            return lines
        lines += logged_since(live)
        stops = sum(1 for seen in lines if STOPS_SERVING.search(seen))
        if stops >= MAX_STOPS or time.monotonic() >= deadline:
            why = f"stopped serving {stops} times" if stops >= MAX_STOPS else "not in sync in time"
            raise BenchmarkError(
                f"initial sync: {why}; the live node logged:\n" + "".join(lines[-40:])
            )


def last_match(pattern: re.Pattern[str], lines: list[str]) -> re.Match[str] | None:
    found = None
    for line in lines:
        found = pattern.search(line) or found
    return found


def sync_run(sync_mb: int, large_share: float, fill_seconds: float, server: str) -> dict[str, Any]:
    """Fill node a, then time node b's copy of its store."""
    total = sync_mb * MB
    large = round(total * large_share / LARGE)
    if large_share > 0:
        large = max(1, large)  # a small run has a body file to copy too
    small = max(0, (total - large * LARGE) // KIB)
    with (
        tempfile.TemporaryDirectory(prefix="txbridge-replication-") as folder,
        pair(server, Path(folder)) as nodes,
    ):
        live = nodes.first_live()
        filled = fill(nodes.url("a"), small, large, fill_seconds, nodes)
        print(
            f"  filled a: {filled['small_messages']:,} messages of 1 KiB and "
            f"{filled['large_messages']:,} of 1 MiB in {filled['seconds']:.1f} s",
            flush=True,
        )
        logged_since(live)
        on_a = store_bytes(nodes.data("a"))
        live_cpu = proc_cpu(live.pid)
        started = time.monotonic()
        backup = nodes.start("b")
        # at least 1 MB/s: slower than that is a failure, not a figure
        deadline = started + START + total / MB
        lines = copy_watched(live, backup, deadline)
        seconds = time.monotonic() - started
        lines += logged_since(live)
        losses = [line.strip() for line in lines if STOPS_SERVING.search(line)]
        sent = last_match(COPY_SENT, lines) or live.until(COPY_SENT, deadline)
        done = last_match(LIVE_IN_SYNC, lines) or live.until(LIVE_IN_SYNC, deadline)
        named_in_sync(nodes.lease_url, "b", deadline)
        cpu = {"node a": proc_cpu(live.pid) - live_cpu, "node b": proc_cpu(backup.pid)}
        for node in nodes.nodes.values():
            node.stop(signal.SIGTERM)
        on_b = store_bytes(nodes.data("b"))
    # the write-ahead log holds pages of the file again (until a checkpoint): not counted
    size = on_a["sqlite_file"] + on_a["large_messages"]
    live_seconds = float(done.group(1))
    return {
        "sync_mb": sync_mb,
        "large_share": large_share,
        "large_message_bytes": LARGE,
        "min_large_message_size": LARGE_THRESHOLD,
        "lease": asdict(DEFAULTS),
        "fill": filled,
        "store_on_live": on_a,
        "store_on_backup": on_b,
        "store_bytes": size,
        "copy_bytes_sent": int(sent.group(1)),
        "seconds_from_backup_start": seconds,
        "seconds_live_reported": live_seconds,
        "copies_started": sum(1 for line in lines if ANNOUNCED.search(line)),
        "live_node_stopped_serving": losses,
        "mb_per_s": size / MB / seconds,
        # the live node logs its figure to the hundredth of a second
        "mb_per_s_live_reported": size / MB / live_seconds if live_seconds else None,
        "cpu_seconds": cpu,
    }


# -- 5. failback ---------------------------------------------------------------------------

NAMED_A_IN_SYNC = re.compile(r"replication: a/\S+ is in sync \(")
"""The live node b names the restarted primary in sync, and hands the lease over."""
A_LIVE = re.compile(r"node a: LIVE, epoch (\d+)")


def stamped(found: re.Match[str]) -> float:
    """The wall-clock time of a node's log line (stamped to the microsecond)."""
    return datetime.strptime(found.string.split(" ", 1)[0], TIME_FORMAT).timestamp()


def failback_run(kills: int, server: str) -> dict[str, Any]:
    """``kills`` failbacks of a pair whose primary, a, has ``allow-failback``: once b is in
    sync, a is killed with SIGKILL and b takes over; a is started again, copies b's store,
    b names it in sync and hands the lease over, a is LIVE and a blocking client sends one
    durable message to a's port. The seconds from a's start (the handover included) and
    from b naming it in sync (the handover alone) to a LIVE (its log line) and to that
    send's confirmation; then b copies from a again before the next kill."""
    figures: dict[str, list[float]] = {
        "restart_to_live": [],
        "restart_to_confirmed": [],
        "sync_to_live": [],
        "sync_to_confirmed": [],
    }
    epochs: list[int] = []
    with (
        tempfile.TemporaryDirectory(prefix="txbridge-replication-") as folder,
        pair(server, Path(folder), FAST, failback=True) as nodes,
    ):
        nodes.first_live()
        nodes.start("b")
        nodes.in_sync("a", "b", time.monotonic() + START)
        for kill in range(kills):
            nodes.nodes["a"].stop(signal.SIGKILL)
            nodes.nodes["b"].until(r"node b: LIVE", time.monotonic() + REAP + PING + START)
            restarted = time.time()
            primary = nodes.start("a")
            deadline = time.monotonic() + 2 * START  # its start, then the copy
            named = nodes.nodes["b"].until(NAMED_A_IN_SYNC, deadline)
            live = primary.until(A_LIVE, deadline)
            sent = first_confirmed_send(nodes.ports["a"], deadline, QUEUE)
            confirmed = time.time() - (time.monotonic() - sent)
            epochs.append(int(live.group(1)))
            for name, since, until in (
                ("restart_to_live", restarted, stamped(live)),
                ("restart_to_confirmed", restarted, confirmed),
                ("sync_to_live", stamped(named), stamped(live)),
                ("sync_to_confirmed", stamped(named), confirmed),
            ):
                figures[name].append(until - since)
            print(
                f"  failback {kill + 1}/{kills}: from a's start to LIVE "
                f"{figures['restart_to_live'][-1]:.3f} s, to its first confirmed send "
                f"{figures['restart_to_confirmed'][-1]:.3f} s; from b naming it in sync to "
                f"LIVE {figures['sync_to_live'][-1]:.3f} s, to the send "
                f"{figures['sync_to_confirmed'][-1]:.3f} s",
                flush=True,
            )
            nodes.in_sync("a", "b", time.monotonic() + START)  # b is a's backup again
    return {
        "kills": kills,
        "reap_s": REAP,
        "ping_s": PING,
        "query_timeout_s": QUERY_TIMEOUT,
        "retry_interval_s": RETRY,
        "epochs": epochs,
        **{name: {"seconds": values, **percentiles(values)} for name, values in figures.items()},
    }


def report_failback(failback: dict[str, Any]) -> None:
    def shown(name: str) -> str:
        return f"p50 {failback[name]['p50']:.2f} s, max {failback[name]['max']:.2f} s"

    print(
        f"failback ({failback['kills']} rounds; reap {REAP:g} s, ping {PING:g} s): from the "
        f"restarted primary's start to LIVE {shown('restart_to_live')}, to its first "
        f"confirmed send {shown('restart_to_confirmed')}; from its backup naming it in sync "
        f"(the handover) to LIVE {shown('sync_to_live')}, to the first confirmed send "
        f"{shown('sync_to_confirmed')}"
    )


# -- the run -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks replication")
    parser.add_argument("--repeat", type=int, default=3, help="A/B throughput rounds (3)")
    parser.add_argument("--count", type=int, default=50_000, help="messages per run (50000)")
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="the producer stops sending after (60)"
    )
    parser.add_argument("--kills", type=int, default=3, help="kill -9s of the live node (3)")
    parser.add_argument(
        "--sync-mb", type=int, default=1024, help="MB of message bodies to copy (1024)"
    )
    parser.add_argument(
        "--large-share",
        type=float,
        default=0.25,
        help="of those bytes, the share in 1 MiB large messages (0.25)",
    )
    parser.add_argument(
        "--fill-seconds", type=float, default=600.0, help="bound on filling the store (600)"
    )
    parser.add_argument(
        "--postgresql", default=DEFAULT_SERVER, help=f"server URL (default {DEFAULT_SERVER})"
    )
    parser.add_argument(
        "--output", type=Path, help="write the JSON here, not to benchmarks/results/"
    )
    parser.add_argument(
        "--only",
        choices=["quorum", "failback"],
        help="run one part alone (quorum: the failover by a quorum vote, no database; "
        "failback: the primary's failback, --kills rounds)",
    )
    args = parser.parse_args(argv)
    if min(args.repeat, args.count, args.kills, args.sync_mb) < 1:
        parser.error("--repeat, --count, --kills and --sync-mb must be positive")
    if not 0.0 <= args.large_share <= 1.0:
        parser.error("--large-share must be between 0 and 1")
    began = time.monotonic()
    if args.only == "quorum":
        return quorum_only(args.kills, args.output, began)
    if args.only == "failback":
        return failback_only(args.kills, args.postgresql, args.output, began)
    try:
        print("durable 1 KiB messages through node a, A/B:", flush=True)
        rates = throughput(args.count, args.seconds, args.repeat, Clients(), args.postgresql)
        print("kill -9 of the live node, to the first confirmed send on its backup:", flush=True)
        kills = kills_run(args.kills, args.postgresql)
        print("the same, by a quorum vote (no lease):", flush=True)
        quorum = quorum_kills_run(args.kills)
        print(f"initial sync of {args.sync_mb} MB:", flush=True)
        sync = sync_run(args.sync_mb, args.large_share, args.fill_seconds, args.postgresql)
        print("failback of the restarted primary:", flush=True)
        failback = failback_run(args.kills, args.postgresql)
    except BenchmarkError as error:
        print(f"replication benchmark failed: {error}", file=sys.stderr)
        return 1
    report(rates, kills, sync)
    report_quorum(quorum)
    report_failback(failback)
    load = os.getloadavg()
    path = save(
        "replication",
        {
            "load_average": list(load),
            "minutes": (time.monotonic() - began) / 60,
            "throughput": rates,
            "failover": kills,
            "failover_by_quorum": quorum,
            "initial_sync": sync,
            "failback": failback,
        },
        args.output,
    )
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"saved {path}")
    return 0


def quorum_only(kills: int, output: Path | None, began: float) -> int:
    """``--only quorum``: the failover by a quorum vote alone."""
    return _one_part(
        "kill -9 of the live node to the first confirmed send on its backup, by a quorum vote:",
        lambda: quorum_kills_run(kills),
        report_quorum,
        ("replication-quorum", "failover_by_quorum"),
        output=output,
        began=began,
    )


def failback_only(kills: int, server: str, output: Path | None, began: float) -> int:
    """``--only failback``: the primary's failback alone."""
    return _one_part(
        "failback of the restarted primary:",
        lambda: failback_run(kills, server),
        report_failback,
        ("replication-failback", "failback"),
        output=output,
        began=began,
    )


def _one_part(
    title: str,
    run: Callable[[], dict[str, Any]],
    show: Callable[[dict[str, Any]], None],
    names: tuple[str, str],
    *,
    output: Path | None,
    began: float,
) -> int:
    """One part of the benchmark alone: run it, print it, save it as ``names`` (the
    file's name, the figures' key) with the load average."""
    try:
        print(title, flush=True)
        figures = run()
    except BenchmarkError as error:
        print(f"replication benchmark failed: {error}", file=sys.stderr)
        return 1
    show(figures)
    load = os.getloadavg()
    saved, key = names
    document = {"load_average": list(load), "minutes": (time.monotonic() - began) / 60}
    path = save(saved, {**document, key: figures}, output)
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"saved {path}")
    return 0


def report(rates: dict[str, Any], kills: dict[str, Any], sync: dict[str, Any]) -> None:
    """The table of the run's figures."""
    cases, ratio = rates["cases"], rates["ratio_replicated_to_unreplicated"]
    rate = {case: f"{cases[case]['msgs_per_s']:,.0f}" for case in cases}
    rows: list[tuple[str, str, str, str]] = [
        ("durable 1 KiB messages (medians)", "unreplicated", "replicated", "ratio"),
        ("msgs/s", rate["unreplicated"], rate["replicated"], f"{ratio:.2f} (goal {RATIO_GOAL})"),
    ]
    for key, label in (("latency_p50_ms", "confirm p50 ms"), ("latency_p99_ms", "confirm p99 ms")):
        rows.append(
            (label, f"{cases['unreplicated'][key]:.1f}", f"{cases['replicated'][key]:.1f}", "")
        )
    for node in ("node a", "node b"):
        cpu = [
            cases[case]["cpu_seconds_per_100k"].get(node) for case in ("unreplicated", "replicated")
        ]
        shown = ["-" if value is None else f"{value:.1f}" for value in cpu]
        rows.append((f"{node} CPU s per 100k msgs", shown[0], shown[1], ""))
    print()
    for label, *cells in rows:
        print(f"{label:34} {cells[0]:>13} {cells[1]:>11}  {cells[2]}".rstrip())
    print()
    print(
        f"kill -9 of the live node to the first confirmed send on its backup ({kills['kills']} "
        f"kills; reap {REAP:g} s, ping {PING:g} s): p50 {kills['p50']:.2f} s, max "
        f"{kills['max']:.2f} s (goal: reap + ping, {kills['goal_s']:g} s)"
    )
    on_a, filled = sync["store_on_live"], sync["fill"]
    live_rate = sync["mb_per_s_live_reported"]
    live_rate = "-" if live_rate is None else f"{live_rate:,.1f} MB/s"
    print(
        f"initial sync: {filled['small_messages']:,} messages of 1 KiB (rows) and "
        f"{filled['large_messages']:,} of 1 MiB (large messages, min_large_message_size "
        f"100 KiB: body files)\n"
        f"  store on the live node {sync['store_bytes'] / MB:,.1f} MB: SQLite file "
        f"{on_a['sqlite_file'] / MB:,.1f} MB + large bodies {on_a['large_messages'] / MB:,.1f} "
        f"MB in {on_a['large_files']} files (WAL {on_a['sqlite_wal'] / MB:,.1f} MB not "
        f"counted); the copy sent {sync['copy_bytes_sent'] / MB:,.1f} MB\n"
        f"  from the backup's start to in sync {sync['seconds_from_backup_start']:.2f} s: "
        f"{sync['mb_per_s']:,.1f} MB/s; the live node's own figure (announced to in sync) "
        f"{sync['seconds_live_reported']:.2f} s: {live_rate}\n"
        f"  CPU s: node a {sync['cpu_seconds']['node a']:.1f}, "
        f"node b {sync['cpu_seconds']['node b']:.1f} (from its start)"
    )
    if sync["live_node_stopped_serving"]:
        print(
            f"  NOTE: the live node stopped serving {len(sync['live_node_stopped_serving'])} "
            f"time(s) during the copy (it lost the lease) and the copy started over "
            f"({sync['copies_started']} copies): the seconds from the backup's start include "
            f"that; the live node's own figure is its last copy's"
        )
