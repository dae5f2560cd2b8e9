"""Producer credits on a real node process (issue 5): several producers, each on its own
connection, sending to one address under BLOCK cannot take it past ``max-size-bytes`` by
more than the sum of their producer windows; each stalls without credit, and each resumes
once a consumer drains the address."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from bridge.client.api import Client, connect
from tests.system.flow import KIB, MIB, address_of, poll, queue_of
from tests.system.nodes import node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

PRODUCERS = 4
WINDOW = 128 * KIB
MAX_SIZE = MIB
BODY = 8 * KIB
PER_PRODUCER = 2 * MAX_SIZE // BODY  # together eight times what the address may hold
WAIT = 30.0


async def produce(client: Client, number: int) -> None:
    """Send PER_PRODUCER messages tagged with the producer's number, in order, keeping to
    the address's credit; returns once every one is confirmed."""
    for sequence in range(PER_PRODUCER):
        if not client.address_writable("shared"):
            await client.when_writable("shared").addTimeout(WAIT, reactor)
        body = b"%02d %06d " % (number, sequence) + bytes(BODY - 10)
        if sequence == PER_PRODUCER - 1:
            await client.send("shared", body).addTimeout(WAIT, reactor)
        else:
            client.send_nowait("shared", body)


@pytest_twisted.ensureDeferred
async def test_producers_overshoot_max_size_by_no_more_than_their_windows(nodes):
    document = node_document(
        address=[
            {
                "name": "shared",
                "routing": "anycast",
                "max-size-bytes": MAX_SIZE,
                "address-full-policy": "BLOCK",
            }
        ]
    )
    document["acceptor"][0]["producer-window-size"] = WINDOW
    node = await nodes(document).wait_started()
    producers = [await connect(reactor, node.core_url) for _ in range(PRODUCERS)]
    producing = [
        Deferred.fromCoroutine(produce(client, number)) for number, client in enumerate(producers)
    ]

    # Every producer is out of credit, and the node has taken (confirmed) all it sent.
    blocked = await poll(
        node,
        lambda s: (
            s["producers_blocked"] == PRODUCERS
            and not any(client.address_writable("shared") for client in producers)
            and not any(client.unconfirmed for client in producers)
        ),
        "every producer is blocked",
    )
    shared = address_of(blocked, "shared")
    assert shared["full"]
    assert MAX_SIZE <= shared["memory_bytes"] <= MAX_SIZE + PRODUCERS * WINDOW, shared
    assert not any(each.called for each in producing)
    depth = queue_of(blocked, "shared")["depth"]
    assert depth < PRODUCERS * PER_PRODUCER

    consumer_client = await connect(reactor, node.core_url)
    consumer = await consumer_client.consumer("shared")
    last = [-1] * PRODUCERS
    for _ in range(PRODUCERS * PER_PRODUCER):
        message = await consumer.receive().addTimeout(WAIT, reactor)
        number, sequence = (int(part) for part in message.body[:9].split())
        assert sequence == last[number] + 1, "a producer's messages out of order"
        last[number] = sequence
        message.ack()
    assert last == [PER_PRODUCER - 1] * PRODUCERS
    for each in producing:
        await each
    await poll(  # the acknowledgements are on their way: memory goes as they arrive
        node,
        lambda s: s["producers_blocked"] == 0 and address_of(s, "shared")["memory_bytes"] == 0,
        "the address is empty and no producer blocked",
    )
    for client in [*producers, consumer_client]:
        await client.close()
