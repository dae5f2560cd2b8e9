"""Dead letters on a real node process, driven by stomp.py: a message NACKed until it
reaches ``max-delivery-attempts``, and one NACKed with ``requeue:false``, go to the
``dead-letter-address`` naming where they came from, and being persistent they are still
there after a restart of the process."""

from __future__ import annotations

import signal

import pytest
import pytest_twisted
from twisted.internet.threads import deferToThread

from tests.system.flow import poll, queue_of
from tests.system.nodes import node_document
from tests.system.test_stomp_flow import connect

SETTINGS = {
    "address-setting": [
        {"match": "work", "max-delivery-attempts": 2, "dead-letter-address": "DLQ"},
    ]
}


def refuse(port: int) -> list[tuple[str, str]]:
    """Send two persistent messages to /queue/work; NACK the first twice (requeued), the
    second once without requeue. Returns (body, delivery-count) of what it was given (a
    first delivery carries no ``delivery-count``: 1)."""
    conn, listener = connect(port)
    conn.send("/queue/work", b"poison", headers={"persistent": "true", "kind": "bad"})
    conn.send("/queue/work", b"unwanted", headers={"persistent": "true", "receipt": "sent"})
    listener.wait(lambda: "sent" in listener.receipts, "the receipt of the sends")
    conn.subscribe("/queue/work", id="w", ack="client-individual", headers={"prefetch-count": 1})
    listener.wait(lambda: len(listener.messages) >= 1, "the first delivery")
    conn.nack(listener.messages[0].headers["ack"])
    listener.wait(lambda: len(listener.messages) >= 2, "the redelivery")
    conn.nack(listener.messages[1].headers["ack"])  # its second delivery: the limit
    listener.wait(lambda: len(listener.messages) >= 3, "the second message")
    conn.nack(listener.messages[2].headers["ack"], requeue="false")
    conn.disconnect(receipt="bye")
    return [(m.body.decode(), m.headers.get("delivery-count", "1")) for m in listener.messages]


def dead_letters(port: int) -> list[dict[str, str]]:
    conn, listener = connect(port)
    conn.subscribe("/queue/DLQ", id="d", ack="client")
    listener.wait(lambda: len(listener.messages) >= 2, "two dead letters")
    conn.ack(listener.messages[-1].headers["ack"])
    conn.disconnect(receipt="bye")
    return [{"body": m.body.decode(), **m.headers} for m in listener.messages]


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_refused_messages_reach_the_dead_letter_address_and_survive_a_restart(nodes):
    document = node_document(
        acceptor=[{"name": "stomp", "url": "tcp://127.0.0.1:0", "protocols": ["stomp"]}],
        **SETTINGS,
    )
    node = await nodes(document).wait_started()
    given = await deferToThread(refuse, node.ports["stomp"])
    assert given == [("poison", "1"), ("poison", "2"), ("unwanted", "1")]
    await poll(node, lambda d: queue_of(d, "DLQ")["depth"] == 2, "two dead letters")
    await node.stop(signal.SIGTERM)
    node = await nodes(document, name="node").wait_started()
    work = queue_of(await poll(node, lambda d: True, "status"), "work")
    assert work["depth"] == 0
    letters = await deferToThread(dead_letters, node.ports["stomp"])
    assert [(m["body"], m["destination"]) for m in letters] == [
        ("poison", "/queue/DLQ"),
        ("unwanted", "/queue/DLQ"),
    ]
    for letter in letters:
        assert (letter["_TXB_ORIG_ADDRESS"], letter["_TXB_ORIG_QUEUE"]) == ("work", "work")
        assert letter["persistent"] == "true" and "delivery-count" not in letter
    assert letters[0]["kind"] == "bad"
