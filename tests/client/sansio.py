"""Driving a ClientSession with packets, as the node would, without any I/O."""

from __future__ import annotations

from typing import Any

from bridge.client.errors import ClientError
from bridge.client.events import Event, Settled
from bridge.client.session import ClientSession
from bridge.message import Message
from bridge.protocol import Connected, Packet, Send, SendMany, decode_packet, encode_packet


def message(address: str = "orders", body: bytes = b"hello", **fields: Any) -> Message:
    return Message(
        id=fields.pop("id", 0),
        address=address,
        durable=fields.pop("durable", True),
        headers=fields.pop("headers", {}),
        body=body,
        **fields,
    )


class Outcomes:
    """Records what each settle callback heard, by name."""

    def __init__(self) -> None:
        self.heard: dict[str, ClientError | None] = {}

    def __call__(self, name: str):  # type: ignore[no-untyped-def]
        def settle(error: ClientError | None) -> None:
            assert name not in self.heard, f"{name} settled twice"
            self.heard[name] = error

        return settle


class Driver:
    """A session and what passed between it and the node."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    def sent(self, read_chunks: bool = True) -> list[Packet]:
        """What the session sends now, a SEND_MANY as the SENDs it stands for."""
        packets: list[Packet] = []
        for packet in self.packets(read_chunks):
            if isinstance(packet, SendMany):
                packets += [
                    Send(packet.first_sequence + i, packet.tx_id, m)
                    for i, m in enumerate(packet.messages)
                ]
            else:
                packets.append(packet)
        return packets

    def packets(self, read_chunks: bool = True) -> list[Packet]:
        """What the session sends now, as it sends it."""
        return [decode_packet(t, p) for t, p in self.session.data_to_send(read_chunks)]

    def all_sent(self) -> list[Packet]:
        """Everything, chunks included, until the session has nothing more to say."""
        packets: list[Packet] = []
        while more := self.sent():
            packets += more
        return packets

    def feed(self, *packets: Packet) -> list[Event]:
        """The node sends ``packets``; settle callbacks are run; the events returned."""
        for packet in packets:
            self.session.receive_frame(*encode_packet(packet))
        events = self.session.take_events()
        for event in events:
            if isinstance(event, Settled):
                event.callback(event.error)
            elif hasattr(event, "callbacks"):
                for callback in event.callbacks:
                    callback(None)
        return events

    def events(self) -> list[Event]:
        return self.feed()


def ready(
    producer_window_size: int = -1, producer_window_size_cap: int = -1, **options: Any
) -> Driver:
    """A session logged in to a node that answered CONNECTED, granting
    ``producer_window_size``; the session's own cap is ``producer_window_size_cap``."""
    driver = Driver(
        ClientSession(
            client_id="test",
            user="alice",
            password="secret",
            producer_window_size=producer_window_size_cap,
            **options,
        )
    )
    driver.session.connection_made()
    driver.sent()
    driver.feed(Connected("node-a", "id-a", 1, producer_window_size))
    return driver
