"""Two ways to send a stored large body to a TCP peer, against each other: read the file
a chunk at a time and send the bytes (what a node does when it delivers or forwards a
large message), or hand the file to the kernel with ``os.sendfile``.

``sendfile`` skips the copy into the process and the copy back into the socket, so it
looks like the way to cut a node's CPU for large messages. Whether it does depends on
the kernel and the device: on loopback (where the peers benchmarks run, and veth is
alike) the kernel then queues the file's pages one by one and the receiver still copies
them. This measures it: a file of ``--size`` (in the page cache, as a body just written
is) sent ``--total`` bytes' worth in ``--chunk`` pieces to a reader thread that reads
into one buffer, each way in turn, rounds alternating which goes first.

    python -m benchmarks body-send [--size 10MiB] [--total 1GiB] [--chunk 1MiB]
                                   [--repeat 3] [--output FILE]

prints each way's MB/s and the sender's and reader's CPU seconds per GiB, medians of the
rounds, and sendfile's sender CPU over read-and-send's; saves
benchmarks/results/body_send.json.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.runner import save
from bridge.config.units import parse_size

MB = 1_000_000
GIB = 1024**3
WAYS = ("read-and-send", "sendfile")
READ_BUFFER = 256 * 1024


def _read_all(conn: socket.socket, total: int, cpu: list[float]) -> None:
    """Read ``total`` bytes into one buffer; the thread's CPU seconds into ``cpu``."""
    started = time.thread_time()
    buffer = bytearray(READ_BUFFER)
    got = 0
    while got < total:
        received = conn.recv_into(buffer)
        if not received:
            raise ConnectionError(f"the sender closed after {got} of {total} bytes")
        got += received
    cpu.append(time.thread_time() - started)


def _send_file(way: str, conn: socket.socket, fd: int, size: int, chunk: int) -> None:
    """One body, ``chunk`` bytes at a time."""
    offset = 0
    while offset < size:
        want = min(chunk, size - offset)
        if way == "sendfile":
            sent = 0
            while sent < want:
                went = os.sendfile(conn.fileno(), fd, offset + sent, want - sent)
                if not went:
                    raise OSError(f"the body file ended at {offset + sent} of {size} bytes")
                sent += went
        else:
            conn.sendall(os.pread(fd, want, offset))
        offset += want


def one_way(way: str, path: Path, size: int, total: int, chunk: int) -> dict[str, Any]:
    """Send the body at ``path`` until ``total`` bytes went; rate and CPU per GiB."""
    bodies = max(1, total // size)
    sent = bodies * size
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = socket.create_connection(server.getsockname()[:2])
        receiver, _ = server.accept()
    reader_cpu: list[float] = []
    reader = threading.Thread(target=_read_all, args=(receiver, sent, reader_cpu))
    fd = os.open(path, os.O_RDONLY)
    try:
        reader.start()
        started, cpu = time.monotonic(), time.thread_time()
        for _ in range(bodies):
            _send_file(way, sender, fd, size, chunk)
        sender_cpu = time.thread_time() - cpu
        reader.join(timeout=120)
        elapsed = time.monotonic() - started
    finally:
        os.close(fd)
        sender.close()
        receiver.close()
    if reader.is_alive() or not reader_cpu:
        raise RuntimeError(f"{way}: the reader did not get all {sent} bytes within 120 s")
    per_gib = GIB / sent
    return {
        "way": way,
        "bytes": sent,
        "seconds": elapsed,
        "mb_per_s": sent / MB / elapsed,
        "sender_cpu_per_gib": sender_cpu * per_gib,
        "reader_cpu_per_gib": reader_cpu[0] * per_gib,
    }


def run(size: int, total: int, chunk: int, repeat: int) -> dict[str, Any]:
    """Every round, both ways in turn (the first alternating); medians per way."""
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="txbridge-body-send-") as folder:
        path = Path(folder) / "body.msg"
        path.write_bytes(os.urandom(size))  # written now: in the page cache, as a new body
        for round_number in range(repeat):
            order = WAYS if round_number % 2 == 0 else WAYS[::-1]
            for way in order:
                result = one_way(way, path, size, total, chunk)
                runs[way].append(result)
                print(
                    f"round {round_number + 1} {way:13} {result['mb_per_s']:8,.0f} MB/s, "
                    f"sender {result['sender_cpu_per_gib']:.3f} CPU s/GiB, "
                    f"reader {result['reader_cpu_per_gib']:.3f}",
                    flush=True,
                )
    medians = {
        way: {
            key: statistics.median(run[key] for run in runs[way])
            for key in ("mb_per_s", "sender_cpu_per_gib", "reader_cpu_per_gib")
        }
        for way in WAYS
    }
    base = medians["read-and-send"]["sender_cpu_per_gib"]
    ratio = medians["sendfile"]["sender_cpu_per_gib"] / base if base > 0 else 0.0
    return {"runs": runs, "medians": medians, "sendfile_over_read_sender_cpu": ratio}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks body-send")
    parser.add_argument("--size", type=parse_size, default="10MiB", help="the body's size")
    parser.add_argument(
        "--total", type=parse_size, default="1GiB", help="bytes sent per way and round"
    )
    parser.add_argument(
        "--chunk", type=parse_size, default="1MiB", help="bytes per read or sendfile call"
    )
    parser.add_argument("--repeat", type=int, default=3, help="rounds (medians kept)")
    parser.add_argument("--output", type=Path, help="write the JSON here, not to results/")
    args = parser.parse_args(argv)
    size, total, chunk = args.size, args.total, args.chunk
    if min(size, total, chunk) < 1 or args.repeat < 1:
        parser.error("--size, --total, --chunk and --repeat must be positive")
    report = run(size, total, chunk, args.repeat)
    for way, figures in report["medians"].items():
        print(
            f"{way:13} {figures['mb_per_s']:8,.0f} MB/s, sender "
            f"{figures['sender_cpu_per_gib']:.3f} CPU s/GiB, reader "
            f"{figures['reader_cpu_per_gib']:.3f}"
        )
    print(f"sendfile / read-and-send, sender CPU: {report['sendfile_over_read_sender_cpu']:.2f}")
    options = {"size": size, "total": total, "chunk": chunk, "repeat": args.repeat}
    path = save("body_send", {"options": options, **report}, args.output)
    print(f"saved {path}")
    return 0
