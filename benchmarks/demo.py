"""The demo: two processes exchange framed messages over mutual TLS through a reader that
stalls and resumes; the writer stops and goes on with it, in bounded memory.

    python -m benchmarks demo [--bytes 512MiB-in-bytes] [--frame-size BYTES] [--timeout S]

If either peer fails or exits early, or the whole run takes longer than ``--timeout``, the
demo says so and exits non-zero; both peers are stopped whichever way it ends (SIGTERM
included).
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from pathlib import Path

from benchmarks.runner import ROOT, Event, Peer, peers
from transport.certs import DevelopmentCA

MIB = 1024 * 1024


def _mib(n: float) -> str:
    return f"{n / MIB:,.1f} MiB"


FAILED = "peer-failed"


def _follow(peer: Peer, name: str, until: str, out: queue.Queue[tuple[str, Event]]) -> None:
    """Pass each of ``peer``'s events to ``out`` until the one called ``until``; if the peer
    fails or exits first, pass a ``peer-failed`` event saying why instead."""
    try:
        peer.until(until, on_event=lambda event: out.put((name, event)))
    except Exception as error:
        out.put((name, {"event": FAILED, "t": time.monotonic(), "message": str(error)}))


def _start_follower(
    peer: Peer, name: str, until: str, out: queue.Queue[tuple[str, Event]]
) -> threading.Thread:
    # A daemon: a follower blocked on a peer that will not talk must not keep the demo up.
    thread = threading.Thread(
        target=_follow, args=(peer, name, until, out), name=f"follow-{name}", daemon=True
    )
    thread.start()
    return thread


class DemoFailed(Exception):
    """A peer failed, or the run took too long."""


def _next(events: queue.Queue[tuple[str, Event]], deadline: float) -> tuple[str, Event]:
    """The next event of either peer; a peer's failure or the deadline raise DemoFailed."""
    try:
        who, event = events.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        raise DemoFailed("the demo did not finish in time (see --timeout)") from None
    if event["event"] == FAILED:
        raise DemoFailed(f"the {who} failed: {event['message']}")
    return who, event


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks demo")
    parser.add_argument("--bytes", type=int, default=512 * MIB)
    parser.add_argument("--frame-size", type=int, default=256 * 1024)
    parser.add_argument("--stall-every", type=int, default=100 * MIB)
    parser.add_argument("--stall-for", type=float, default=1.0)
    parser.add_argument("--dir", type=Path, default=ROOT / "var" / "demo")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds the whole run may take"
    )
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except DemoFailed as failure:
        print(f"\ndemo failed: {failure}", file=sys.stderr, flush=True)
        return 1


def _run(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout

    certs = args.dir / "certs"
    ca = DevelopmentCA.open_or_create(certs)
    ca.issue("reader", server=True)
    ca.issue("writer", server=False)
    print(
        f"txbridge demo: {_mib(args.bytes)} in {args.frame_size // 1024} KiB frames over mutual TLS"
    )
    print(f"  certificates from the development CA in {certs}")
    print(f"  the reader stalls for {args.stall_for:.1f}s after every {_mib(args.stall_every)}")

    events: queue.Queue[tuple[str, Event]] = queue.Queue()
    threads: list[threading.Thread] = []
    with peers() as start:
        reader = start(
            [
                "reader",
                "--url",
                "tls://127.0.0.1:0",
                "--once",
                "--verify",
                "--frame-size",
                str(args.frame_size),
                "--cert",
                str(certs / "reader.pem"),
                "--key",
                str(certs / "reader.key"),
                "--ca",
                str(certs / "ca.pem"),
                "--verify-client",
                "--stall-every",
                str(args.stall_every),
                "--stall-for",
                str(args.stall_for),
            ]
        )
        threads.append(_start_follower(reader, "reader", "received", events))
        who, listening = _next(events, deadline)
        while listening["event"] != "listening":
            who, listening = _next(events, deadline)
        print(f"  the reader listens on port {listening['port']}\n", flush=True)
        writer = start(
            [
                "writer",
                "--url",
                f"tls://127.0.0.1:{listening['port']}",
                "--verify",
                "--bytes",
                str(args.bytes),
                "--frame-size",
                str(args.frame_size),
                "--cert",
                str(certs / "writer.pem"),
                "--key",
                str(certs / "writer.key"),
                "--ca",
                str(certs / "ca.pem"),
                "--stall-report",
                "0.2",
            ]
        )
        threads.append(_start_follower(writer, "writer", "done", events))
        started = time.monotonic()
        results: dict[str, Event] = {}
        idle_rss = 0
        stalled = False
        while len(results) < 2:
            who, event = _next(events, deadline)
            kind = event["event"]
            at = f"{event['t'] - started:6.2f}s"
            if who == "writer" and kind == "started":
                idle_rss = event["idle_rss"]
            elif kind == "reader-stalled":
                print(f"{at}  reader stalls       after {_mib(event['received'])}")
            elif kind == "reader-resumed":
                print(f"{at}  reader resumes")
            elif kind == "stalled":
                stalled = True
                print(
                    f"{at}  writer paused       at {_mib(event['written'])} sent: "
                    f"the connection is not writable"
                )
            elif kind == "resumed" and stalled:
                stalled = False
                print(f"{at}  writer resumes      writable again")
            elif kind in ("done", "received"):
                results[who] = event
    # The peers are stopped (their output closed), so the followers are ending.
    for thread in threads:
        thread.join(timeout=10)

    sent, got = results["writer"], results["reader"]
    intact = (
        got["crc"] == sent["crc"] and got["received"] == sent["written"] and not got["order_error"]
    )
    idle = idle_rss
    print()
    print(
        f"sent {_mib(sent['written'])}, received {_mib(got['received'])}: "
        f"{'intact and in order' if intact else 'MISMATCH'}"
    )
    print(f"throughput {got['received'] / sent['elapsed'] / 1e6:,.0f} MB/s including the stalls")
    print(f"writer paused {sent['pauses']} times (each time its queue reached the high water mark)")
    growth = _mib(sent["peak_rss"] - idle)
    print(
        f"peak memory: writer {_mib(sent['peak_rss'])} ({growth} above idle), "
        f"reader {_mib(got['peak_rss'])}, for {_mib(args.bytes)} moved"
    )
    return 0 if intact else 1
