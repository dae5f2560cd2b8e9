"""Hostile clients against a node: its peak RSS under each attack next to its idle RSS,
and the latency of a well-behaved client's sends meanwhile.

Each case starts a fresh node process (core and STOMP acceptors, a management port,
security off unless the case turns it on) and a well-behaved STOMP client that sends small
messages with a receipt one after another, timing each; the node's idle RSS is read once
that client is warm (and logged in, where security is on: its sends then need no hash).
Then the attack runs (``scale`` times the size of the reported reproduction) while a thread
samples the node's RSS every 20 ms; the figures are the idle RSS, the peak, the RSS once
the attackers are gone, and the p50/p99 of the well-behaved client's send-to-receipt time
during the attack. The cases (``CASES``; a further attack is one more entry):

- ``core-prelogin``: 50 core connections each send a frame header announcing 4 MiB, then
  4 MiB - 1 bytes of it, and go silent (before any login);
- ``stomp-partial``: 50 STOMP connections each send CONNECT and a SEND announcing a
  4 MiB - 1 body, send the body but its last byte, and go silent;
- ``stomp-waves``: 5 waves of those STOMP connections, each closed by the client once its
  bytes are in; the node runs with the cycle collector off, so what a closed connection
  does not free at once stays (``marks``: the RSS after each wave, which must not grow
  from wave to wave; the allocator keeps up to 32 MiB of freed heap for reuse, see
  ``transport.allocator``);
- ``login-flood``: 30 STOMP connections at once each CONNECT as a different unknown user
  with a wrong password (so no refusal of a user from a host spares a hash), on a node
  with security on; each is answered (``busy``: how many were refused at once as busy).

The goal: peak RSS under any attack <= idle + 64 MiB + the configured budgets (the
``partial-frame-budget``, plus ``max-concurrent-hashes`` scrypt hashes of 128 MiB where
security is on), and a p99 under 50 ms.

    python -m benchmarks hostile [--scale 10] [--cases core-prelogin,...] [--output FILE]

prints a table and writes benchmarks/results/hostile.json (or ``--output``).
"""

from __future__ import annotations

import argparse
import base64
import json
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tomli_w

from benchmarks.node_throughput import (
    BIN,
    STARTED,
    BenchmarkError,
    Child,
    children,
    proc_status,
)
from benchmarks.runner import save
from security.config import DEFAULT_MAX_CONCURRENT_HASHES
from security.passwords import DEFAULT_N, DEFAULT_R, hash_password

MIB = 1024 * 1024
FRAME = 4 * MIB
PARTIAL_FRAME_BUDGET = 64 * MIB
GOAL_HEADROOM = 64 * MIB
GOAL_P99 = 0.050
ESTABLISHED = "01"
"""The state of an established connection in /proc/net/tcp."""
HOLD = 2.0
"""Seconds the attackers stay connected and silent after sending."""
HASH_MEMORY = 128 * DEFAULT_N * DEFAULT_R
"""What one scrypt hash at the default cost holds (128 MiB), for logins and users alike."""
CALM = ("calm", "calm-S3cret-pw")
"""The well-behaved client's user and password, where security is on."""
WRONG = "wr0ng-Gue55-pw"

CONFIG = """\
[node]
name = "hostile"
data-dir = "data"
partial-frame-budget = {budget}

[[acceptor]]
name = "core"
url = "tcp://127.0.0.1:0"
protocols = ["core"]

[[acceptor]]
name = "stomp"
url = "tcp://127.0.0.1:0"
protocols = ["stomp"]

[management]
url = "http://127.0.0.1:0"

{security}"""

NO_CYCLE_COLLECTOR = (
    "import gc, sys; gc.disable(); from bridge.ctl.main import main; "
    "sys.exit(main(['node', '--config', 'node.toml']))"
)


@dataclass
class Node:
    child: Child
    ports: dict[str, int]
    marks: list[int] = field(default_factory=list)
    """RSS at points an attack marks (after each wave)."""
    busy: int = 0
    """Attackers the node refused at once as busy with other logins."""
    login: tuple[str, str] | None = None
    """The user and password the management API needs, where security is on."""

    @property
    def pid(self) -> int:
        return int(self.child.process.pid)

    def rss(self) -> int:
        return proc_status(self.pid, "VmRSS")

    def connections(self) -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{self.ports['management']}/status")
        if self.login is not None:
            basic = base64.b64encode(":".join(self.login).encode()).decode()
            request.add_header("Authorization", f"Basic {basic}")
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(json.loads(response.read())["node"]["connections"])


def security_table(directory: Path, security: Mapping[str, int] | None) -> str:
    """The ``[security]`` table: off without ``security``; else on with these keys and a
    users file in ``directory`` holding the well-behaved client's user, who may send to
    (and so create) its topic and read the management API."""
    if security is None:
        return tomli_w.dumps({"security": {"enabled": False}})
    user, password = CALM
    users = {user: {"password": hash_password(password), "roles": ["calm"]}}
    (directory / "users.toml").write_text(tomli_w.dumps({"users": users}))
    settings = [
        {"match": "calm", "send": ["calm"], "create-address": ["calm"]},
        {"match": "txbridge.management", "manage": ["calm"]},
    ]
    table = {"enabled": True, "users-file": "users.toml", **security, "setting": settings}
    return tomli_w.dumps({"security": table})


def start_node(
    directory: Path,
    stack: ExitStack,
    *,
    budget: int,
    cycle_collector: bool = True,
    security: Mapping[str, int] | None = None,
) -> Node:
    """A node on ``CONFIG`` with a partial-frame ``budget`` (without the cycle collector
    if asked; with ``security`` on, see :func:`security_table`), once started."""
    config = CONFIG.format(budget=budget, security=security_table(directory, security))
    (directory / "node.toml").write_text(config)
    argv = (
        [str(BIN / "txbridge"), "node", "--config", "node.toml"]
        if cycle_collector
        else [sys.executable, "-c", NO_CYCLE_COLLECTOR]
    )
    child = Child("the node", argv, directory, directory / "node.stderr")
    stack.callback(child.stop)
    started = child.until(STARTED, time.monotonic() + 60)
    ports = {
        name: int(where.rsplit(":", 1)[1])
        for name, where in (part.split(" on ") for part in started.group(3).split(", "))
    }
    return Node(child, ports, login=None if security is None else CALM)


# -- the attacks -------------------------------------------------------------------------


def _open(port: int, host: str = "127.0.0.1") -> socket.socket:
    """A connection to the node from ``host`` (a loopback address)."""
    return socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(host, 0))


def _queued(ports: set[int]) -> int:
    """Bytes on their way to ``ports`` that the kernel holds on established loopback TCP
    connections (not yet delivered, or delivered and not yet read), from /proc/net/tcp."""
    total = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            if fields[3] != ESTABLISHED:
                continue
            local, remote = (int(address.rsplit(":", 1)[1], 16) for address in fields[1:3])
            tx, rx = (int(queue, 16) for queue in fields[4].split(":"))
            if local in ports:
                total += rx
            elif remote in ports:
                total += tx
    return total


def wait_read(node: Node) -> None:
    """Until the node has read every byte sent to it: what the attack costs is in it."""
    ports = {node.ports["core"], node.ports["stomp"]}
    _until(lambda: _queued(ports) == 0, "the node to read what the attackers sent")


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    """Send, unless the node closed the connection (as it should, for most attackers)."""
    with suppress(OSError):
        sock.sendall(data)


def _core_partial(port: int) -> socket.socket:
    sock = _open(port)
    _send_quietly(sock, struct.pack(">2sBBI", b"TX", 1, 64, FRAME) + bytes(FRAME - 1))
    return sock


def _stomp_partial(port: int) -> socket.socket:
    sock = _open(port)
    head = b"CONNECT\naccept-version:1.2\nheart-beat:0,0\n\n\x00"
    send = f"SEND\ndestination:/queue/hostile\ncontent-length:{FRAME - 1}\n\n".encode()
    _send_quietly(sock, head + send + bytes(FRAME - 2))
    return sock


def core_prelogin(node: Node, count: int) -> list[socket.socket]:
    return [_core_partial(node.ports["core"]) for _ in range(count)]


def stomp_partial(node: Node, count: int) -> list[socket.socket]:
    return [_stomp_partial(node.ports["stomp"]) for _ in range(count)]


def stomp_waves(node: Node, count: int, waves: int = 5) -> list[socket.socket]:
    for _ in range(waves):
        wave = [_stomp_partial(node.ports["stomp"]) for _ in range(count)]
        wait_read(node)
        for sock in wave:
            sock.close()
        _until(lambda: node.connections() <= 1, "the wave's connections to close")
        node.marks.append(node.rss())
    return []


def _answer(sock: socket.socket) -> bytes:
    """The first frame the node sends on ``sock`` (empty if it closed without one)."""
    data = b""
    while b"\0" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.partition(b"\0")[0]


def login_flood(node: Node, count: int) -> list[socket.socket]:
    """``count`` wrong logins at once, each as a different unknown user, from a host of
    their own (127.0.0.2: the slowdown of the flood's host is not the well-behaved
    client's), until each is answered: every one must be refused (most as busy, the rest
    once hashed). All connect first, then all send their CONNECT, so the logins arrive
    together."""
    connect = "CONNECT\naccept-version:1.2\nheart-beat:0,0\nlogin:{}\npasscode:{}\n\n\0"
    flood = [_open(node.ports["stomp"], "127.0.0.2") for _ in range(count)]
    for number, sock in enumerate(flood):
        _send_quietly(sock, connect.format(f"intruder{number}", WRONG).encode())
    answers = [_answer(sock) for sock in flood]
    accepted = [answer for answer in answers if not answer.startswith(b"ERROR\n")]
    if accepted:
        raise BenchmarkError(f"{len(accepted)} wrong logins were not refused: {accepted[0]!r}")
    node.busy = sum(b"busy with other logins" in answer for answer in answers)
    return flood


@dataclass(frozen=True)
class Case:
    attack: Callable[[Node, int], list[socket.socket]]
    connections: int
    """Attacking connections at scale 1 (the reproduction's)."""
    cycle_collector: bool = True
    security: Mapping[str, int] | None = None
    """The node's ``[security]`` keys, security being on (off without them)."""

    @property
    def hashing_budget(self) -> int:
        """The memory the node's login hashing may take: ``max-concurrent-hashes``
        scrypt hashes at once (none with security off)."""
        if self.security is None:
            return 0
        hashes = self.security.get("max-concurrent-hashes", DEFAULT_MAX_CONCURRENT_HASHES)
        return hashes * HASH_MEMORY


CASES: dict[str, Case] = {
    "core-prelogin": Case(core_prelogin, 50),
    "stomp-partial": Case(stomp_partial, 50),
    "stomp-waves": Case(stomp_waves, 50, cycle_collector=False),
    "login-flood": Case(
        login_flood, 30, security={"max-concurrent-hashes": 2, "max-queued-logins": 16}
    ),
}


# -- the well-behaved client and the sampler ----------------------------------------------


class WellBehaved(threading.Thread):
    """A STOMP client sending small messages with receipts, one at a time, timing each."""

    def __init__(self, port: int, login: tuple[str, str] | None = None) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        credentials = "" if login is None else "login:{}\npasscode:{}\n".format(*login)
        connect = f"CONNECT\naccept-version:1.2\nheart-beat:0,0\n{credentials}\n\x00"
        self.sock.sendall(connect.encode())
        self._buffer = b""
        self._until(b"CONNECTED")
        self.latencies: list[float] = []
        self.recording = False
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def _until(self, marker: bytes) -> None:
        while marker not in self._buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise BenchmarkError("the node closed the well-behaved client's connection")
            self._buffer += chunk
        self._buffer = self._buffer[self._buffer.index(marker) + len(marker) :]

    def send_one(self, number: int) -> float:
        receipt = f"r{number}".encode()
        started = time.perf_counter()
        self.sock.sendall(b"SEND\ndestination:/topic/calm\nreceipt:" + receipt + b"\n\nhello\x00")
        self._until(b"receipt-id:" + receipt + b"\n")
        return time.perf_counter() - started

    def run(self) -> None:
        number = 0
        try:
            while not self.stopping.is_set():
                number += 1
                took = self.send_one(number)
                if self.recording:
                    self.latencies.append(took)
                time.sleep(0.005)
        except BaseException as error:
            self.error = error


class Sampler(threading.Thread):
    def __init__(self, node: Node) -> None:
        super().__init__(daemon=True)
        self.node = node
        self.peak = node.rss()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.02):
            try:
                self.peak = max(self.peak, self.node.rss())
            except (OSError, BenchmarkError):  # the node is gone: the run fails anyway
                return


def _until(test: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{what}: not within {timeout}s")
        time.sleep(0.05)


@dataclass
class Result:
    case: str
    connections: int
    idle_rss: int
    peak_rss: int
    after_rss: int
    sends: int
    p50_ms: float
    p99_ms: float
    goal_rss: int
    marks: list[int]
    """The node's RSS after each wave (waves only)."""
    budgets: int
    """The configured budgets the goal allows: partial frames, login hashing."""
    busy: int
    """Attackers refused at once as busy with other logins (login floods only)."""
    ok: bool = field(default=False)


def run_case(
    name: str, scale: float, directory: Path, budget: int = PARTIAL_FRAME_BUDGET
) -> Result:
    """One attack at ``scale`` times the reproduction, on a fresh node."""
    case = CASES[name]
    count = max(1, round(case.connections * scale))
    with children() as stack:
        node = start_node(
            directory,
            stack,
            budget=budget,
            cycle_collector=case.cycle_collector,
            security=case.security,
        )
        client = WellBehaved(node.ports["stomp"], None if case.security is None else CALM)
        for number in range(200):  # warm: the idle RSS is a working node's
            client.send_one(-number)
        idle = node.rss()
        sampler = Sampler(node)
        sampler.start()
        client.start()
        client.recording = True
        held = case.attack(node, count)
        wait_read(node)
        time.sleep(HOLD)  # the attackers stay, silent: what they cost is held meanwhile
        client.recording = False
        for sock in held:
            sock.close()
        _until(lambda: node.connections() <= 1, "the attackers' connections to close")
        sampler.stopping.set()
        sampler.join()
        client.stopping.set()
        client.join()
        if client.error is not None:
            raise BenchmarkError(f"the well-behaved client failed: {client.error!r}")
        after = node.rss()
        latencies = sorted(client.latencies) or [0.0]
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        budgets = budget + case.hashing_budget
        goal = idle + GOAL_HEADROOM + budgets
        result = Result(
            name,
            count,
            idle,
            sampler.peak,
            after,
            len(client.latencies),
            statistics.median(latencies) * 1000,
            p99 * 1000,
            goal,
            node.marks,
            budgets,
            node.busy,
        )
        result.ok = result.peak_rss <= goal and p99 <= GOAL_P99
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks hostile")
    parser.add_argument("--scale", type=float, default=10.0, help="times the reproduction")
    parser.add_argument("--cases", default=",".join(CASES), help=",".join(CASES))
    parser.add_argument("--output", type=Path, help="write the JSON here, not benchmarks/results/")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    names = [name for name in args.cases.split(",") if name]
    if not names or any(name not in CASES for name in names):
        parser.error(f"--cases takes {','.join(CASES)}, got {args.cases!r}")
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="hostile-") as temporary:
            for name in names:
                directory = Path(temporary) / name
                directory.mkdir()
                results.append(run_case(name, args.scale, directory))
    except BenchmarkError as error:
        print(f"hostile benchmark failed: {error}", file=sys.stderr)
        return 1
    print(
        f"{'case':<15}{'conns':>6}{'idle':>8}{'peak':>8}{'after':>8}{'goal':>8}"
        f"{'p50 ms':>8}{'p99 ms':>8}{'busy':>6}"
    )
    for r in results:
        print(
            f"{r.case:<15}{r.connections:>6}{r.idle_rss / MIB:>8.0f}{r.peak_rss / MIB:>8.0f}"
            f"{r.after_rss / MIB:>8.0f}{r.goal_rss / MIB:>8.0f}{r.p50_ms:>8.1f}{r.p99_ms:>8.1f}"
            f"{r.busy:>6}"
            f"  {'ok' if r.ok else 'MISSES THE GOAL'}"
        )
    figures = {
        "scale": args.scale,
        "partial_frame_budget": PARTIAL_FRAME_BUDGET,
        "hash_memory": HASH_MEMORY,
        "goal": {"rss_headroom": GOAL_HEADROOM, "p99_seconds": GOAL_P99},
        "cases": [asdict(r) for r in results],
    }
    path = save("hostile", figures, args.output)
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
