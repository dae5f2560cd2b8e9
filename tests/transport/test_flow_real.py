"""Flow control on real sockets (TCP and TLS): a reader that stops makes the writer stop,
the writer's memory stays bounded while it tries to push 1 GiB, and after the reader
resumes every byte arrives intact and in order.

Real sockets are the point here: Twisted's in-memory test transports never pause a
producer. The writer is a child process so its memory is its own to measure.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor

from benchmarks.peers import DATA, Reader
from transport.endpoints import listen
from transport.settings import ConnectionSettings

GIB = 1 << 30
FRAME = 1 << 20
HIGH, LOW = 128 * 1024, 32 * 1024
# What a writer may still hand over before it must stop, besides the kernel's buffers:
# its own high water mark, one frame past it, and a flush pass into Twisted's buffer.
OWN_SLACK = HIGH + FRAME + HIGH + 64 * 1024
# Memory the writer may grow by while pushing 1 GiB: a few frames in flight, and TLS's
# copies of them. Far below the gigabyte it is asked to send.
RSS_GROWTH_BOUND = 64 << 20


def _kernel_buffers() -> int:
    """The most loopback TCP can hold in flight: the sender's and receiver's maxima."""
    wmem = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    rmem = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    return wmem + rmem


@pytest.fixture(params=["tcp", "tls"])
def scheme(request):
    return request.param


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_stalled_reader_stops_the_writer_in_bounded_memory(scheme, certs, spawn):
    reader = Reader(reactor, verify=True, stall_after_first=True)
    settings = ConnectionSettings(high_water=HIGH, low_water=LOW, heartbeat_interval=None, ttl=None)
    port = await listen(
        reactor,
        f"{scheme}://127.0.0.1:0",
        lambda: reader,
        settings=settings,
        accepted_types=[DATA],
        tls=certs.server_tls() if scheme == "tls" else None,
    )
    try:
        tls_args = ["--ca", str(certs.ca)] if scheme == "tls" else []
        writer = spawn(
            "-m",
            "benchmarks.peers",
            "writer",
            "--url",
            f"{scheme}://127.0.0.1:{port.getHost().port}",
            "--bytes",
            str(GIB),
            "--frame-size",
            str(FRAME),
            "--high-water",
            str(HIGH),
            "--low-water",
            str(LOW),
            "--verify",
            "--stall-report",
            "0.5",
            *tls_args,
            name=f"{scheme} writer",
        )
        started = await writer.next_event("started")
        stalled = await writer.next_event("stalled")

        # Stopped: unwritable after at most its own marks plus the kernel's buffers.
        assert stalled["written"] <= OWN_SLACK + _kernel_buffers()
        assert stalled["written"] < GIB
        assert writer.named("paused"), "the writer was never told to stop"

        assert reader.connection is not None
        reader.connection.resume_reading()
        done = await writer.next_event("done")
        reason = await reader.lost

        # Everything arrived, intact and in order.
        assert reader.error is None
        assert reader.received == done["written"] == GIB
        assert reader.crc == done["crc"]
        assert "closed cleanly" in str(reason)

        # The writer was told to go on again (the marks themselves are checked exactly in
        # test_outbound_machine), and it never wrote while told to stop.
        assert writer.named("resumed")
        assert done["frames"] == GIB // FRAME

        # Memory stayed bounded while it pushed a gigabyte.
        growth = done["peak_rss"] - started["idle_rss"]
        assert growth < RSS_GROWTH_BOUND, f"the writer grew by {growth / 2**20:.1f} MiB"
        assert await writer.ended == 0
    finally:
        await port.stopListening()
