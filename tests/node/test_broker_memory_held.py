"""An address's memory counts a durable message from its publication, not only once the
store has written it: the sends of one reactor turn all reach the address before the group
commit fires, and the address-full policies must see them (found by the BLOCK system test,
where producers overshot max-size-bytes by a confirmation window's worth)."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from bridge.config.node import parse_node_config
from bridge.message import Message
from bridge.node.broker import AddressFull, Broker
from bridge.store.sqlite import SQLiteMessageStore


def message(body: bytes) -> Message:
    return Message(0, "limited", True, {}, body)


@pytest_twisted.ensureDeferred
async def test_a_durable_send_counts_while_the_store_writes_it(tmp_path: Path) -> None:
    document = {
        "node": {"name": "a", "data-dir": "data"},
        "address": [
            {
                "name": "limited",
                "routing": "anycast",
                "max-size-bytes": 1000,
                "address-full-policy": "FAIL",
            }
        ],
    }
    config = parse_node_config(document, tmp_path / "node.toml")
    broker = Broker(config, SQLiteMessageStore(config.data_dir, reactor))
    await broker.open()
    try:
        memory = broker.addresses["limited"].memory
        first = message(bytes(1000))
        writing = broker.publish(first)
        assert isinstance(writing, Deferred)
        assert memory.size == first.size and memory.full  # before the store has it
        with pytest.raises(AddressFull):
            broker.publish(message(b"more"))  # in the same turn: refused, not let in
        await writing
        assert memory.size == first.size  # counted once, by the queue now
        assert broker.queue("limited").depth == 1
    finally:
        await broker.close()
