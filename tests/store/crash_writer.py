"""The child process of the crash test: writes to a store until it is killed.

``python -m tests.store.crash_writer DATA_DIR MILESTONE [URL]`` opens a store (SQLite in
DATA_DIR, or PostgreSQL at URL), creates queue
``q``, then keeps ``WINDOW`` adds in flight and acknowledges two of every three messages
once their add is confirmed. It prints one JSON line per confirmation, after the Deferred
fired: ``{"event": "add", "id": N}`` and ``{"event": "ack", "id": M}``; so every such line
is a promise that the operation is durable. Before it issues an acknowledgement it prints
``{"event": "acking", "id": M}``: from then on, until it is confirmed, the message may or
may not be gone. Once MILESTONE adds are confirmed it
also prints ``{"event": "milestone"}`` (the test's cue to kill it) and goes on writing.
"""

from __future__ import annotations

import json
import sys

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import react

from bridge.message import Message
from bridge.store import MessageStore, QueueRecord, SQLiteMessageStore
from bridge.store.postgresql import PostgreSQLMessageStore

WINDOW = 64


def body(message_id: int) -> bytes:
    """A body the test can check: derived from the id, a few hundred bytes."""
    return (b"message %d;" % message_id) * 20


def emit(event: str, **fields: object) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")


class Writer:
    def __init__(self, store: MessageStore, milestone: int) -> None:
        self.store = store
        self.milestone = milestone
        self.confirmed = 0
        self.next_id = 1
        self.in_flight = 0
        self.to_ack: list[int] = []
        self.pump_call: IDelayedCall | None = None

    def pump(self) -> None:
        self.pump_call = None
        for message_id in self.to_ack:
            emit("acking", id=message_id)
            self.store.acknowledge("q", message_id).addCallback(self._acked, message_id)
        self.to_ack = []
        while self.in_flight < WINDOW:
            message = Message(
                id=self.next_id,
                address="q",
                durable=True,
                headers={"n": self.next_id},
                body=body(self.next_id),
            )
            self.store.add(message, ["q"]).addCallback(self._added, self.next_id)
            self.next_id += 1
            self.in_flight += 1

    def _added(self, _: None, message_id: int) -> None:
        emit("add", id=message_id)
        self.confirmed += 1
        if self.confirmed == self.milestone:
            emit("milestone")
        self.in_flight -= 1
        if message_id % 3:
            self.to_ack.append(message_id)
        if self.pump_call is None:
            self.pump_call = reactor.callLater(0, self.pump)  # type: ignore[attr-defined]

    def _acked(self, _: None, message_id: int) -> None:
        emit("ack", id=message_id)


async def run(data_dir: str, milestone: int, url: str | None) -> None:
    store: MessageStore
    if url is None:
        store = SQLiteMessageStore(data_dir, reactor)  # type: ignore[arg-type]
    else:
        store = PostgreSQLMessageStore(url, data_dir, reactor)  # type: ignore[arg-type]
    await store.open()
    await store.create_queue(QueueRecord("q", "q", "anycast"))
    emit("ready")
    Writer(store, milestone).pump()
    await Deferred()  # until killed


if __name__ == "__main__":
    url = sys.argv[3] if len(sys.argv) > 3 else None
    react(lambda _: Deferred.fromCoroutine(run(sys.argv[1], int(sys.argv[2]), url)))
