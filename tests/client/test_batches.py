"""SEND_MANY and DELIVER_MANY in the client session (sans-IO): sends gathered in a turn
leave in one frame, in order with every other packet and within the node's frame size; a
DELIVER_MANY is a delivery per message."""

from __future__ import annotations

import io

import pytest

from bridge.client.events import Delivery
from bridge.client.session import ClientSession
from bridge.protocol import (
    LARGE_CHUNK_OVERHEAD,
    Ack,
    ClusterConnect,
    Connected,
    DeliverMany,
    Ok,
    PacketFormatError,
    Send,
    SendConfirmed,
    SendLargeChunk,
    SendMany,
    TxBegin,
    encode_packet,
)
from tests.client.sansio import Driver, Outcomes, message, ready


def consuming(driver: Driver) -> int:
    consumer = driver.session.open_consumer("orders", window_size=-1)
    driver.sent()
    driver.feed(Ok(1))
    return consumer


def test_a_turns_sends_leave_as_one_send_many_with_consecutive_sequences():
    driver = ready()
    outcomes = Outcomes()
    for n in range(5):
        driver.session.send(message(body=b"%d" % n), callback=outcomes(str(n)))
    assert driver.session.gathering
    # Only the turn's end writes a gathered run: after each send, nothing is to write yet.
    assert driver.session.has_data_to_send and not driver.session.has_frames_to_send
    assert driver.session.data_to_send(end_of_turn=False) == []
    [batch] = driver.packets()
    assert isinstance(batch, SendMany)
    assert (batch.first_sequence, batch.tx_id) == (1, None)
    assert [m.body for m in batch.messages] == [b"%d" % n for n in range(5)]
    assert not driver.session.gathering
    driver.feed(SendConfirmed(5))
    assert list(outcomes.heard) == ["0", "1", "2", "3", "4"]


def test_one_send_alone_is_a_plain_send():
    driver = ready()
    driver.session.send(message(body=b"alone"))
    assert driver.packets() == [Send(1, None, message(body=b"alone"))]


def test_the_sends_gathered_go_before_any_other_packet():
    driver = ready()
    consumer = consuming(driver)
    [first, second] = driver.feed(DeliverMany(consumer, 1, 1, (message(id=5), message(id=6))))
    driver.session.send(message(body=b"a"))
    driver.session.send(message(body=b"b"))
    driver.session.ack(second, cumulative=True)
    driver.session.send(message(body=b"c"))
    packets = driver.packets()
    assert packets == [
        SendMany(1, None, (message(body=b"a"), message(body=b"b"))),
        Ack(consumer, 2, True, None, None),
        Send(3, None, message(body=b"c")),
    ]
    assert isinstance(first, Delivery)


def test_a_run_ended_by_another_packet_is_a_frame_to_send_before_the_turn_ends():
    driver = ready()
    consumer = consuming(driver)
    [delivery] = driver.feed(DeliverMany(consumer, 1, 1, (message(id=5),)))
    driver.session.send(message(body=b"a"))
    assert not driver.session.has_frames_to_send
    driver.session.ack(delivery, cumulative=True)
    assert driver.session.has_frames_to_send
    assert len(driver.session.data_to_send(end_of_turn=False)) == 2  # the SEND, the ACK


def test_sends_of_another_transaction_start_another_batch():
    driver = ready()
    tx = driver.session.begin(None)
    driver.session.send(message(body=b"in"), tx_id=tx)
    driver.session.send(message(body=b"out"))
    driver.session.send(message(body=b"out too"))
    assert driver.packets() == [
        TxBegin(1, tx),
        Send(1, tx, message(body=b"in")),
        SendMany(2, None, (message(body=b"out"), message(body=b"out too"))),
    ]


def test_the_client_states_its_frame_size_and_keeps_within_the_nodes():
    driver = Driver(ClientSession(client_id="small", max_frame_size=8192))
    driver.session.connection_made()
    [connect] = driver.sent()
    assert isinstance(connect, ClusterConnect) and connect.max_frame_size == 8192
    driver.feed(Connected("n", "i", 2, -1, 2048))
    for _ in range(10):
        driver.session.send(message(body=b"x" * 400))
    packets = driver.packets()
    assert [len(p.messages) if isinstance(p, SendMany) else 1 for p in packets] == [4, 4, 2]
    assert all(len(encode_packet(p)[1]) <= 2048 for p in packets)


def test_large_chunks_keep_within_the_nodes_frame_size():
    driver = Driver(ClientSession(client_id="small"))
    driver.session.connection_made()
    driver.sent()
    driver.feed(Connected("n", "i", 2, -1, 2048))
    driver.session.send(message(body=b""), body_file=io.BytesIO(b"y" * 5000))
    chunks = [p for p in driver.all_sent() if isinstance(p, SendLargeChunk)]
    assert [len(c.data) for c in chunks] == [2048 - LARGE_CHUNK_OVERHEAD] * 2 + [5000 - 4062]
    assert all(len(encode_packet(c)[1]) <= 2048 for c in chunks)


def test_a_deliver_many_is_one_delivery_per_message():
    driver = ready()
    consumer = consuming(driver)
    events = driver.feed(
        DeliverMany(consumer, 7, 2, (message(id=10), message(id=11), message(id=12)))
    )
    assert [(d.delivery_id, d.delivery_count, d.message.id) for d in events] == [
        (7, 2, 10),
        (8, 2, 11),
        (9, 2, 12),
    ]


def test_a_message_that_cannot_be_encoded_is_refused_before_it_joins_a_batch():
    driver = ready()
    driver.session.send(message(body=b"good"))
    with pytest.raises(PacketFormatError, match=r"SEND\.message"):
        driver.session.send(message(headers={"bad": None}))
    assert driver.packets() == [Send(1, None, message(body=b"good"))]
