"""Receipts and acknowledgements on a real node process, as stomp.py hears them: a
SUBSCRIBE's receipt comes before the subscription's messages, a transaction's SEND
receipts come at its COMMIT, a message NACKed and redelivered can be acknowledged by its
message-id on STOMP 1.0 and 1.1, and a 1.0 client is offered no heart-beats."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
import stomp
from twisted.internet.threads import deferToThread

from tests.system.nodes import node_document
from tests.system.test_stomp_flow import Listener

CONNECTIONS = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}


class OrderedListener(Listener):  # type: ignore[misc]
    """Also keeps every MESSAGE and RECEIPT in the order stomp.py handed them over."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []
        self.connected: dict[str, str] = {}

    def on_connected(self, frame: Any) -> None:
        self.connected = dict(frame.headers)

    def on_message(self, frame: Any) -> None:
        with self.changed:
            self.events.append(("MESSAGE", frame.body.decode()))
        super().on_message(frame)

    def on_receipt(self, frame: Any) -> None:
        with self.changed:
            self.events.append(("RECEIPT", frame.headers["receipt-id"]))
        super().on_receipt(frame)


def connect(port: int, version: str = "1.2") -> tuple[Any, OrderedListener]:
    conn = CONNECTIONS[version]([("127.0.0.1", port)], auto_decode=False)
    listener = OrderedListener()
    conn.set_listener("l", listener)
    conn.connect(wait=True)
    return conn, listener


def subscribe_after_sends(port: int) -> list[tuple[str, str]]:
    """Three messages wait in /queue/early; a SUBSCRIBE with a receipt takes them."""
    producer, sent = connect(port)
    for n in range(3):
        producer.send("/queue/early", f"m{n}".encode(), headers={"persistent": "true"})
    producer.send("/queue/early", b"m3", headers={"persistent": "true", "receipt": "sent"})
    sent.wait(lambda: "sent" in sent.receipts, "the receipt of the sends")
    producer.disconnect(receipt="bye")
    conn, listener = connect(port)
    conn.subscribe("/queue/early", id="s", ack="auto", headers={"receipt": "subscribed"})
    listener.wait(lambda: len(listener.messages) == 4, "the four messages")
    conn.disconnect(receipt="bye")
    return listener.events[:5]


def send_in_a_transaction(port: int) -> list[tuple[str, str]]:
    conn, listener = connect(port)
    tx = conn.begin()
    for n in range(2):
        conn.send(
            "/queue/tx", b"m", headers={"persistent": "true", "transaction": tx, "receipt": f"s{n}"}
        )
    conn.send("/queue/untouched", b"x", headers={"receipt": "outside"})
    listener.wait(lambda: "outside" in listener.receipts, "the receipt of the send outside")
    early = list(listener.receipts)
    conn.commit(tx, receipt="committed")
    listener.wait(lambda: "committed" in listener.receipts, "the COMMIT's receipt")
    conn.disconnect(receipt="bye")
    listener.wait(lambda: "bye" in listener.receipts, "the DISCONNECT's receipt")
    return [("early", receipt) for receipt in early] + [
        event for event in listener.events if event[0] == "RECEIPT"
    ]


def nack_then_ack(port: int, version: str) -> tuple[list[str], list[str]]:
    """NACK a message, then ACK its redelivery by message-id. Returns the delivery counts
    seen and the receipts."""
    conn, listener = connect(port, version)
    conn.subscribe("/queue/retry", id="s1", ack="client-individual")
    conn.send("/queue/retry", b"job", headers={"persistent": "true"})
    listener.wait(lambda: len(listener.messages) == 1, "the first delivery")
    first = listener.messages[0].headers["message-id"]
    if version == "1.0":  # no NACK in 1.0: stomp.py has no method for it
        conn.send_frame("NACK", {"message-id": first})
    else:
        conn.nack(first, "s1")
    listener.wait(lambda: len(listener.messages) == 2, "the redelivery")
    again = listener.messages[1].headers["message-id"]
    assert again == first
    if version == "1.0":
        conn.ack(again, receipt="acked")
    else:
        conn.ack(again, "s1", receipt="acked")
    listener.wait(lambda: "acked" in listener.receipts, "the ACK's receipt")
    conn.disconnect(receipt="bye")
    listener.wait(lambda: "bye" in listener.receipts, "the DISCONNECT's receipt")
    counts = [m.headers.get("delivery-count", "1") for m in listener.messages]  # 1: absent
    return counts, listener.receipts


def heart_beats_offered(port: int) -> str:
    conn, listener = connect(port, "1.0")
    conn.disconnect(receipt="bye")
    return listener.connected["heart-beat"]


ACCEPTORS = [{"name": "stomp", "url": "tcp://127.0.0.1:0", "protocols": ["stomp"]}]


async def stomp_port(nodes: Any) -> int:
    node = await nodes(node_document(acceptor=ACCEPTORS)).wait_started()
    return int(node.ports["stomp"])


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_a_subscribe_receipt_comes_before_the_messages_waiting_for_it(nodes):
    events = await deferToThread(subscribe_after_sends, await stomp_port(nodes))
    assert events == [("RECEIPT", "subscribed")] + [("MESSAGE", f"m{n}") for n in range(4)]


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_the_receipts_of_sends_in_a_transaction_come_at_its_commit(nodes):
    receipts = await deferToThread(send_in_a_transaction, await stomp_port(nodes))
    assert receipts == [
        ("early", "outside"),
        ("RECEIPT", "outside"),
        ("RECEIPT", "s0"),
        ("RECEIPT", "s1"),
        ("RECEIPT", "committed"),
        ("RECEIPT", "bye"),
    ]


@pytest.mark.system
@pytest.mark.parametrize("version", ["1.0", "1.1"])
@pytest_twisted.ensureDeferred
async def test_a_nacked_message_redelivered_is_acknowledged_by_its_message_id(nodes, version):
    counts, receipts = await deferToThread(nack_then_ack, await stomp_port(nodes), version)
    assert counts == ["1", "2"]
    assert receipts == ["acked", "bye"]


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_a_stomp_1_0_client_is_offered_no_heart_beats(nodes):
    assert await deferToThread(heart_beats_offered, await stomp_port(nodes)) == "0,0"
