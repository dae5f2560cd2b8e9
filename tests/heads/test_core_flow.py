"""Flow control over the core head: producer credits granted back per turn and withheld
while a BLOCK address is full, FAIL's refusal, large sends written to their body file, and
large deliveries that go no faster than the consumer's credit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from bridge.protocol import packets as p
from tests.heads.conftest import Node, eventually, message

WINDOW = 4096
SIZE = message("orders", b"x" * 100, durable=False).size


def limited(policy: str) -> dict[str, Any]:
    return {
        "address": [
            {
                "name": "orders",
                "routing": "anycast",
                "max-size-bytes": 10 * SIZE,
                "address-full-policy": policy,
            },
        ]
    }


def start(tmp_path: Path, **extra: Any) -> Node:
    node = Node(tmp_path, extra=extra, producer_window_size=WINDOW)
    return pytest_twisted.blockon(Deferred.fromCoroutine(node.start()))  # type: ignore[no-any-return]


@pytest.fixture
def flow_node(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    running = start(tmp_path, **getattr(request, "param", {}))
    yield running
    pytest_twisted.blockon(Deferred.fromCoroutine(running.stop()))


def sends(first: int, count: int, durable: bool = False) -> list[p.Send]:
    return [
        p.Send(n, None, message("orders", b"x" * 100, durable=durable))
        for n in range(first, first + count)
    ]


def granted(peer: Any) -> int:
    return sum(c.credits for c in peer.of(p.ProducerCredits))


@pytest_twisted.ensureDeferred
async def test_connected_gives_the_window_and_a_turn_of_sends_is_granted_back_at_once(
    flow_node: Node,
) -> None:
    peer = await flow_node.peer()
    assert peer.of(p.Connected)[0].producer_window_size == WINDOW
    peer.send(*sends(1, 5))
    await peer.confirmed(5)
    await peer.until(lambda: granted(peer) == 5 * SIZE)
    assert {c.address for c in peer.of(p.ProducerCredits)} == {"orders"}


@pytest.mark.parametrize("flow_node", [limited("BLOCK")], indirect=True)
@pytest_twisted.ensureDeferred
async def test_block_withholds_credits_until_the_address_has_room(flow_node: Node) -> None:
    peer = await flow_node.peer()
    peer.send(*sends(1, 12))
    await peer.confirmed(12)  # accepted: the window bounds what a producer overshoots
    head = flow_node.head
    assert head is not None
    await peer.until(lambda: head.producers_blocked == 1)
    before = granted(peer)
    assert before < 12 * SIZE
    consumer = await flow_node.peer()
    consumer.send(p.CreateConsumer(1, 1, "orders", None, False, p.UNLIMITED))
    await consumer.until(lambda: len(consumer.of(p.Deliver)) == 12)
    for delivery in consumer.of(p.Deliver)[:3]:
        consumer.send(p.Ack(1, delivery.delivery_id, False, None, None))
    await peer.until(lambda: granted(peer) == 12 * SIZE)
    assert head.producers_blocked == 0


@pytest.mark.parametrize("flow_node", [limited("FAIL")], indirect=True)
@pytest_twisted.ensureDeferred
async def test_fail_refuses_the_send_that_finds_the_address_full(flow_node: Node) -> None:
    peer = await flow_node.peer()
    peer.send(*sends(1, 11))
    await peer.until(lambda: granted(peer) == 11 * SIZE)  # refused bytes come back too
    [failed] = peer.of(p.SendFailed)
    assert failed.sequence == 11 and failed.code is p.ErrorCode.ADDRESS_FULL
    assert "address 'orders' is full" in failed.message and "FAIL" in failed.message


def large_files(node: Node) -> list[Path]:
    folder = node.path / "data" / "large-messages"
    return sorted(folder.iterdir()) if folder.exists() else []


@pytest_twisted.ensureDeferred
async def test_a_large_send_refused_at_its_start_writes_nothing(flow_node: Node) -> None:
    peer = await flow_node.peer()
    body = b"L" * 300_000
    peer.send(p.SendLargeBegin(1, 7, message("orders", b""), len(body)))  # no transaction 7
    peer.send(p.SendLargeChunk(1, body[:200_000], False))
    peer.send(p.SendLargeChunk(1, body[200_000:], True))
    await peer.confirmed(1)
    [failed] = peer.of(p.SendFailed)
    assert failed.code is p.ErrorCode.NOT_FOUND and "transaction 7" in failed.message
    assert large_files(flow_node) == []


@pytest_twisted.ensureDeferred
async def test_a_large_send_cut_off_leaves_no_file(flow_node: Node) -> None:
    peer = await flow_node.peer()
    peer.send(p.SendLargeBegin(1, None, message("orders", b""), 300_000))
    peer.send(p.SendLargeChunk(1, b"h" * 100_000, False))
    await peer.until(lambda: bool(large_files(flow_node)))
    await peer.close()
    await eventually(lambda: not large_files(flow_node))
    assert flow_node.broker is not None and flow_node.broker.queue("orders").depth == 0


@pytest_twisted.ensureDeferred
async def test_a_large_delivery_goes_no_faster_than_the_consumers_credit(
    flow_node: Node,
) -> None:
    producer = await flow_node.peer()
    body = bytes(range(256)) * 4096  # 1 MiB: four chunks of the consumer's frame size
    producer.send(p.SendLargeBegin(1, None, message("orders", b""), len(body)))
    producer.send(p.SendLargeChunk(1, body, True))
    producer.send(p.Send(2, None, message("orders", b"small")))
    await producer.confirmed(2)
    consumer = await flow_node.peer(max_frame_size=256 * 1024 + p.LARGE_CHUNK_OVERHEAD)
    consumer.send(p.CreateConsumer(1, 1, "orders", None, False, 300_000))
    await consumer.until(lambda: len(consumer.of(p.DeliverLargeChunk)) == 2)
    # 300,000 bytes of credit: the begin and two 256 KiB chunks, then nothing (a request
    # answered after them shows the node has nothing more on its way).
    consumer.send(p.CreateQueue(9, "probe", "probe", p.Routing.ANYCAST, False, None))
    await consumer.reply(9)
    assert len(consumer.of(p.DeliverLargeChunk)) == 2 and consumer.of(p.Deliver) == []
    consumer.send(p.ConsumerCredits(1, 1 << 20))
    await consumer.until(lambda: bool(consumer.of(p.Deliver)))
    chunks = consumer.of(p.DeliverLargeChunk)
    assert b"".join(c.data for c in chunks) == body
    assert [c.last for c in chunks] == [False, False, False, True]
    assert consumer.of(p.Deliver)[0].message.body == b"small"
    [begin] = consumer.of(p.DeliverLargeBegin)
    assert begin.total_size == len(body) and begin.message.body == b""
    consumer.send(p.Ack(1, 2, True, None, None))
    await eventually(lambda: not large_files(flow_node))


@pytest_twisted.ensureDeferred
async def test_a_send_held_behind_a_durable_write_gets_its_credit_once_routed(
    flow_node: Node,
) -> None:
    """Non-durable sends behind a durable one wait for its write (to keep their order)
    and their credit comes back when they are routed, so none is lost for the producer."""
    peer = await flow_node.peer()
    mixed = [*sends(1, 1, durable=True), *sends(2, 3), *sends(5, 1, durable=True), *sends(6, 2)]
    peer.send(*mixed)
    await peer.confirmed(7)
    await peer.until(lambda: granted(peer) == 7 * SIZE)
    bodies = [entry.message.durable for entry in flow_node.broker.queue("orders").browse()]
    assert bodies == [send.message.durable for send in mixed]
