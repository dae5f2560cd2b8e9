"""Every address-full policy with a slow consumer, on a real node process (issue 5):
PAGE keeps the node's memory flat while ten times ``max-size-bytes`` is queued and then
delivers everything in order; BLOCK stalls the producer (no credit) and resumes it as the
consumer drains; FAIL gives the producer ``AddressFull`` naming the address; DROP confirms,
drops and counts the drops in ``/metrics``."""

from __future__ import annotations

import re

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from bridge.client.api import Client, connect
from bridge.client.errors import AddressFull, ClientError
from tests.system.flow import KIB, MIB, RssSampler, address_of, metrics, poll, queue_of, status
from tests.system.nodes import node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

BODY = 16 * KIB
"""Small messages (under min-large-message-size): paging applies to their bodies."""
WAIT = 30.0


def body(number: int) -> bytes:
    return b"%08d" % number + bytes(BODY - 8)


def policy_document(policy: str, max_size: int | str, **acceptor: object) -> dict[str, object]:
    document = node_document(
        address=[
            {
                "name": "slow",
                "routing": "anycast",
                "max-size-bytes": max_size,
                "address-full-policy": policy,
            }
        ]
    )
    document["acceptor"][0].update(acceptor)  # type: ignore[index]
    return document


async def produce(client: Client, count: int, durable: bool = True) -> list[ClientError | None]:
    """Send ``count`` numbered messages to ``slow`` while the client and the address are
    writable, waiting (bounded) for writability otherwise; fires with every outcome, once
    each send is settled."""
    outcomes: list[ClientError | None] = []
    settled: Deferred[None] = Deferred()

    def on_settled(error: ClientError | None) -> None:
        outcomes.append(error)
        if len(outcomes) == count:
            settled.callback(None)

    for number in range(count):
        if not client.address_writable("slow"):
            await client.when_writable("slow").addTimeout(WAIT, reactor)
        client.send_nowait("slow", body(number), durable=durable, on_settled=on_settled)
    await settled.addTimeout(WAIT, reactor)
    return outcomes


async def receive_numbers(client: Client, count: int, window: int = MIB) -> list[int]:
    """Consume ``count`` messages from ``slow``, acknowledging each; their numbers."""
    consumer = await client.consumer("slow", window_size=window)
    numbers = []
    for _ in range(count):
        message = await consumer.receive().addTimeout(WAIT, reactor)
        numbers.append(int(message.body[:8]))
        message.ack()
    await consumer.close()
    return numbers


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "non-durable"])
@pytest_twisted.ensureDeferred
async def test_page_keeps_memory_flat_then_delivers_everything_in_order(nodes, durable):
    max_size = 2 * MIB
    node = await nodes(policy_document("PAGE", "2MiB")).wait_started()
    client = await connect(reactor, node.core_url)
    count = 10 * max_size // BODY  # ten times max-size-bytes
    memory: list[int] = []

    sampler = RssSampler({"node": node.pid or 0}).start()
    producing = Deferred.fromCoroutine(produce(client, count, durable))
    while not producing.called:
        memory.append(address_of(await status(node), "slow")["memory_bytes"])
    assert (await producing) == [None] * count
    queued = await status(node)
    sampler.stop()

    slow = address_of(queued, "slow")
    message_size = max_size // 64  # a message's size is its body plus a few header bytes
    assert queue_of(queued, "slow")["depth"] == count
    assert slow["paged_messages"] >= count - max_size // BODY
    assert slow["paged_bytes"] >= (count * BODY) - max_size - message_size
    assert slow["messages_paged"] == slow["paged_messages"]
    assert max([*memory, slow["memory_bytes"]]) <= max_size + message_size, memory
    # Twenty MiB are queued; the node holds about two of them, plus what paging costs.
    assert sampler.growth("node") < 12 * MIB, sampler.describe()

    sampler = RssSampler({"node": node.pid or 0}).start()
    numbers = await receive_numbers(client, count)
    sampler.stop()
    assert numbers == list(range(count))
    drained = address_of(
        await poll(  # the acknowledgements are on their way: memory goes as they arrive
            node, lambda s: address_of(s, "slow")["memory_bytes"] == 0, "the address is empty"
        ),
        "slow",
    )
    assert drained["paged_messages"] == drained["paged_bytes"] == 0
    assert sampler.growth("node") < 12 * MIB, sampler.describe()
    await client.close()


@pytest_twisted.ensureDeferred
async def test_block_stalls_the_producer_and_resumes_it_as_the_consumer_drains(nodes):
    max_size = MIB
    window = 256 * KIB
    document = policy_document("BLOCK", "1MiB", **{"producer-window-size": "256KiB"})
    node = await nodes(document).wait_started()
    producer = await connect(reactor, node.core_url)
    count = 4 * max_size // BODY
    producing = Deferred.fromCoroutine(produce(producer, count))

    # Blocked: no credit, and the node confirmed every send it took (so it holds them all).
    blocked = await poll(
        node,
        lambda s: (
            s["producers_blocked"] >= 1
            and not producer.address_writable("slow")
            and producer.unconfirmed == 0
        ),
        "the producer is blocked",
    )
    slow = address_of(blocked, "slow")
    assert slow["full"] and slow["address_full_policy"] == "BLOCK"
    assert max_size <= slow["memory_bytes"] <= max_size + window + BODY
    assert not producing.called
    stalled_at = queue_of(blocked, "slow")["depth"]
    assert stalled_at < count
    # Still stalled a request later: no credit came back while the address is full.
    again = await status(node)
    assert queue_of(again, "slow")["depth"] == stalled_at
    assert again["producers_blocked"] >= 1 and not producer.address_writable("slow")

    consumer_client = await connect(reactor, node.core_url)
    numbers = await receive_numbers(consumer_client, count)
    assert numbers == list(range(count))
    assert (await producing) == [None] * count
    assert (await status(node))["producers_blocked"] == 0
    for client in (producer, consumer_client):
        await client.close()


@pytest_twisted.ensureDeferred
async def test_fail_gives_the_producer_address_full_naming_the_address(nodes):
    node = await nodes(policy_document("FAIL", "256KiB")).wait_started()
    client = await connect(reactor, node.core_url)
    count = 4 * 256 * KIB // BODY
    outcomes = await produce(client, count)
    refused = [error for error in outcomes if error is not None]
    accepted = count - len(refused)
    assert refused, "no send was refused"
    assert 256 * KIB // BODY <= accepted <= 256 * KIB // BODY + 1
    assert all(isinstance(error, AddressFull) for error in refused), refused[0]
    text = str(refused[0])
    assert "'slow'" in text and "ADDRESS_FULL" in text and "full" in text.split(":", 1)[1]

    slow = address_of(await status(node), "slow")
    assert slow["sends_refused"] == len(refused)
    assert slow["full"]
    # The consumer gets the accepted messages, in order; then the address takes sends again.
    consumer_client = await connect(reactor, node.core_url)
    assert await receive_numbers(consumer_client, accepted) == list(range(accepted))
    await client.send("slow", body(count))
    for each in (client, consumer_client):
        await each.close()


@pytest_twisted.ensureDeferred
async def test_drop_confirms_drops_and_counts_in_metrics(nodes):
    node = await nodes(policy_document("DROP", "256KiB")).wait_started()
    client = await connect(reactor, node.core_url)
    count = 4 * 256 * KIB // BODY
    assert await produce(client, count) == [None] * count  # every send is confirmed

    slow = address_of(await status(node), "slow")
    kept = queue_of(await status(node), "slow")["depth"]
    dropped = slow["messages_dropped"]
    assert dropped == count - kept and dropped >= count // 2
    text = await metrics(node)
    series = r'^txbridge_address_messages_dropped_total\{address="slow"\} (\S+)$'
    found = re.search(series, text, re.M)
    assert found is not None, text
    assert float(found.group(1)) == dropped

    consumer_client = await connect(reactor, node.core_url)
    assert await receive_numbers(consumer_client, kept) == list(range(kept))
    for each in (client, consumer_client):
        await each.close()
