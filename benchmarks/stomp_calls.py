"""Python calls per message on the node's STOMP path, counted in process: a figure that the
machine's load does not change (a timed run on a shared machine does not say much).

One ``StompSession`` on a broker with its SQLite store (the real reactor, the store's
writer thread), over a sink that serializes every frame as the head's connection does.
A subscription on ``/queue/bench`` with ``--ack`` (auto, client or client-individual);
then ``--rounds`` rounds of ``--batch`` persistent 1 KiB SENDs, their bytes parsed and
handed over as one read would hand them, a receipt on the last, each round waited out
until the store is idle: the MESSAGEs, and with a client ack mode one ACK per MESSAGE
(client-individual) or one cumulative ACK for the round (client). The calls of the
reactor thread are counted with ``sys.setprofile`` (Python functions, and C functions
apart); the store's writer thread is not counted. With ``--time``, nothing is counted:
the reactor thread's CPU time (``time.thread_time``) per message is measured instead,
the median of ``--repeat`` runs (a timed figure moves with the machine: compare two
trees in turn). ``--non-persistent`` sends without ``persistent:true``.

    python -m benchmarks stomp-calls [--ack auto] [--batch 50] [--rounds 100] [--top 0]
    python -m benchmarks stomp-calls --ack auto --time [--repeat 5] [--non-persistent]

prints the calls per message (``--top N``: and the N functions called most per message),
or the microseconds of reactor-thread CPU per message.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from cryptography import x509
from twisted.internet import reactor as _reactor
from twisted.internet import task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorCore, IReactorTime
from zope.interface import implementer

from benchmarks.runner import save
from bridge.config.node import parse_node_config
from bridge.heads.stomp import StompHead, StompSettings
from bridge.heads.stomp.frames import (
    NEED_DATA,
    Command,
    Frame,
    FrameParser,
    Version,
    serialize,
    serialize_bytes,
)
from bridge.heads.stomp.interfaces import IStompTransport
from bridge.heads.stomp.session import StompSession
from bridge.message import LargeBody
from bridge.node.broker import Broker
from bridge.store.sqlite import SQLiteMessageStore
from security import SecurityStore

reactor: Any = _reactor
ACK_MODES = ("auto", "client", "client-individual")
_ACK_ID = re.compile(rb"\nack:([^\n]*)\n")
"""A 1.2 MESSAGE head's ack id."""


def _ack_id(found: re.Match[bytes] | None) -> str:
    return found.group(1).decode() if found is not None else ""


@implementer(IStompTransport)
class _Sink:
    """The session's connection: serializes each frame (as the head's does) and keeps it;
    a waiter per command hears of the next one."""

    peer = "127.0.0.1:1"
    is_writable = True

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.heads: list[bytes] = []
        """The heads of the frames sent serialized (MESSAGE frames in 1.2)."""
        self.waiting: dict[Command, Deferred[Frame]] = {}

    def send(self, frame: Frame) -> None:
        serialize(frame, Version.V1_2)
        self.frames.append(frame)
        waiter = self.waiting.pop(frame.command, None)
        if waiter is not None:
            waiter.callback(frame)

    def send_serialized(self, head: bytes, body: bytes) -> None:
        self.heads.append(head)

    def expect(self, command: Command) -> Deferred[Frame]:
        waiter: Deferred[Frame] = Deferred()
        self.waiting[command] = waiter
        return waiter

    def close(self) -> None:
        pass

    def pause_reading(self, reason: str) -> None:
        pass

    def resume_reading(self, reason: str) -> None:
        pass

    def set_heart_beats(self, send_every: float | None, silence_limit: float | None) -> None:
        pass

    def send_large(self, frame: Frame, body: LargeBody) -> None:
        raise AssertionError("no message here is large")

    def peer_certificates(self) -> list[x509.Certificate]:
        return []


class _Counter:
    """``sys.setprofile``'s hook: calls of Python functions and of C functions, by name."""

    def __init__(self, by_name: bool) -> None:
        self.python = 0
        self.c = 0
        self.by_name: collections.Counter[str] | None = collections.Counter() if by_name else None

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self.python += 1
            if self.by_name is not None:
                code = frame.f_code
                self.by_name[f"{Path(code.co_filename).name}:{code.co_name}"] += 1
        elif event == "c_call":
            self.c += 1


def _nothing() -> None:
    """Run on the store's writer thread: the batch before it is written."""


async def _turn() -> None:
    turned: Deferred[None] = Deferred()
    reactor.callLater(0, turned.callback, None)
    await turned


async def count_calls(
    ack: str, batch: int, rounds: int, top: int, *, timed: bool = False, persistent: bool = True
) -> dict[str, Any]:
    """The calls per message of ``rounds`` rounds of ``batch`` messages (after a warm-up);
    ``timed``: the reactor thread's CPU microseconds per message instead."""
    with tempfile.TemporaryDirectory(prefix="txbridge-stomp-calls-") as folder:
        directory = Path(folder)
        config = parse_node_config(
            {
                "node": {"name": "calls", "data-dir": str(directory / "data")},
                "address": [{"name": "bench", "routing": "anycast"}],
                "security": {"enabled": False},
            },
            directory / "node.toml",
        )
        store = SQLiteMessageStore(config.data_dir, reactor)
        broker = Broker(config, store)
        await broker.open()
        head = StompHead(broker, SecurityStore(config.security, time.monotonic), reactor=reactor)
        sink = _Sink()
        clock: IReactorTime = reactor
        session = StompSession(
            broker,
            head.security,
            sink,
            clock=clock,
            authenticate=head.authenticate,
            settings=StompSettings(ttl=None, heart_beat=None),
        )

        def frame(command: Command, headers: dict[str, str], body: bytes = b"") -> None:
            session.event_received(Frame(command, tuple(headers.items()), body))

        async def idle() -> None:
            for _ in range(3):  # the automatic acks' turn, then their write
                await _turn()
                await store.between_batches(_nothing)

        connected = sink.expect(Command.CONNECTED)
        frame(Command.CONNECT, {"accept-version": "1.2"})
        await connected
        subscribed = sink.expect(Command.RECEIPT)
        subscribe = {"id": "s", "destination": "/queue/bench", "ack": ack, "receipt": "s"}
        frame(Command.SUBSCRIBE, subscribe)
        await subscribed
        parser = FrameParser(version=Version.V1_2)

        def read(number: int) -> bytes:
            """A round's SENDs as the client writes them (built before counting)."""
            send: tuple[tuple[str, str], ...] = (("destination", "/queue/bench"),)
            if persistent:
                send += (("persistent", "true"),)
            body = b"%08d" % number + b"x" * 1016
            frames = [Frame(Command.SEND, send, body)] * (batch - 1)
            frames.append(Frame(Command.SEND, (*send, ("receipt", f"r{number}")), body))
            return b"".join(serialize_bytes(f, Version.V1_2) for f in frames)

        reads = [read(number) for number in range(5 + rounds)]

        async def one_round(number: int) -> None:
            seen = len(sink.heads)
            received = sink.expect(Command.RECEIPT)
            parser.feed(reads[number])  # parsed and handled as the connection does
            while (event := parser.next_event()) is not NEED_DATA:
                session.event_received(event)  # type: ignore[arg-type]
            session.read_ended()
            await received
            await idle()
            # (read in C, so that the client's work is not counted as the node's)
            acks = [_ACK_ID.search(head) for head in sink.heads[seen:]]
            if len(acks) != batch:
                raise RuntimeError(f"round {number}: {len(acks)} MESSAGEs of {batch}")
            if ack == "client":
                frame(Command.ACK, {"id": _ack_id(acks[-1])})
            elif ack == "client-individual":
                for found in acks:
                    frame(Command.ACK, {"id": _ack_id(found)})
            await idle()

        for number in range(5):
            await one_round(number)
        counter = _Counter(by_name=top > 0)
        started = time.thread_time()
        if not timed:
            sys.setprofile(counter)
        try:
            for number in range(rounds):
                await one_round(5 + number)
        finally:
            sys.setprofile(None)
        cpu = time.thread_time() - started
        errors = [f for f in sink.frames if f.command is Command.ERROR]
        depth = broker.queue("bench").depth
        session.connection_lost()
        await broker.close()
    if errors or depth:
        raise RuntimeError(f"{len(errors)} ERROR frames, {depth} messages left on the queue")
    messages = batch * rounds
    figures: dict[str, Any] = {"ack": ack, "batch": batch, "rounds": rounds}
    if timed:
        figures["cpu_us_per_message"] = cpu / messages * 1e6
        return figures
    figures["python_calls_per_message"] = counter.python / messages
    figures["c_calls_per_message"] = counter.c / messages
    if counter.by_name is not None:
        figures["top"] = [
            (name, calls / messages) for name, calls in counter.by_name.most_common(top)
        ]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks stomp-calls")
    parser.add_argument("--ack", choices=ACK_MODES, action="append", help="default: all")
    parser.add_argument("--batch", type=int, default=50, help="SENDs per read")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--top", type=int, default=0, help="list the N most called")
    parser.add_argument(
        "--time", action="store_true", help="reactor-thread CPU per message, not calls"
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed runs (median kept)")
    parser.add_argument(
        "--non-persistent", action="store_true", help="SENDs without persistent:true"
    )
    parser.add_argument("--output", type=Path, help="write the JSON here, not to results/")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.batch < 1 or args.rounds < 1 or args.repeat < 1:
        parser.error("--batch, --rounds and --repeat must be positive")
    if args.time and args.top:
        parser.error("--top counts calls: not with --time")
    persistent = not args.non_persistent
    kind = "persistent" if persistent else "non-persistent"
    results: list[dict[str, Any]] = []

    async def run(_: IReactorCore) -> None:
        for ack in args.ack or ACK_MODES:
            if args.time:
                runs = [
                    await count_calls(
                        ack, args.batch, args.rounds, 0, timed=True, persistent=persistent
                    )
                    for _ in range(args.repeat)
                ]
                each = sorted(run["cpu_us_per_message"] for run in runs)
                results.append({**runs[0], "cpu_us_per_message": each[len(each) // 2]})
                print(
                    f"ack:{ack:17} {each[len(each) // 2]:6.2f} µs of reactor-thread CPU per "
                    f"{kind} SEND (median of {args.repeat}: "
                    f"{' / '.join(f'{us:.2f}' for us in each)})",
                    flush=True,
                )
                continue
            figures = await count_calls(
                ack, args.batch, args.rounds, args.top, persistent=persistent
            )
            results.append(figures)
            print(
                f"ack:{ack:17} {figures['python_calls_per_message']:7.1f} Python calls and "
                f"{figures['c_calls_per_message']:6.1f} C calls per message "
                f"({args.rounds} rounds of {args.batch})",
                flush=True,
            )
            for name, calls in figures.get("top", []):
                print(f"    {calls:6.2f}  {name}")

    async def run_and_save(reactor: IReactorCore) -> None:
        await run(reactor)
        figures = {"persistent": persistent, "timed": args.time, "results": results}
        print(f"saved {save('stomp_calls', figures, args.output)}")

    task.react(lambda r: Deferred.fromCoroutine(run_and_save(r)))  # (exits with its status)
