"""Recovery puts a stored queue back in slices of the reactor's turns, with the garbage
collector off meanwhile; the loaded messages are frozen out of its passes until the broker
closes (docs/ha.md, "Timings")."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import LoopingCall

from benchmarks.activation import QUEUE, fill
from bridge.config.node import parse_node_config
from bridge.node.broker import Broker
from bridge.node.recovery import SLICE, YOUNG_COLLECTION
from bridge.store.sqlite import SQLiteMessageStore

MESSAGES = 20 * SLICE


@pytest_twisted.ensureDeferred
async def test_a_stored_queue_comes_back_whole_in_slices_and_frozen_until_closed(
    tmp_path: Path,
) -> None:
    fill(tmp_path / "data", MESSAGES)
    config = parse_node_config({"node": {"name": "a", "data-dir": "data"}}, tmp_path / "n.toml")
    broker = Broker(config, SQLiteMessageStore(config.store_dir, reactor))
    collecting: list[bool] = []
    turns = LoopingCall(lambda: collecting.append(gc.isenabled()))
    turns.start(0, now=False)  # once per reactor turn that runs timed calls
    frozen_before = gc.get_freeze_count()
    try:
        await broker.open()
    finally:
        turns.stop()
    try:
        assert gc.isenabled()
        assert collecting and not any(collecting)  # the reactor turned, the collector off
        assert broker.queues[QUEUE].depth == MESSAGES
        assert gc.get_freeze_count() > frozen_before
    finally:
        await broker.close()
    assert gc.get_freeze_count() == 0


@pytest_twisted.ensureDeferred
async def test_young_collections_are_rarer_while_a_broker_is_open(tmp_path: Path) -> None:
    """Raised by the first broker that opens, Python's thresholds again once the last
    one closes, whatever the order."""
    before = gc.get_threshold()
    brokers = []
    for name in ("a", "b"):
        config = parse_node_config(
            {"node": {"name": name, "data-dir": f"data-{name}"}}, tmp_path / f"{name}.toml"
        )
        broker = Broker(config, SQLiteMessageStore(config.store_dir, reactor))
        await broker.open()
        brokers.append(broker)
        assert gc.get_threshold() == (YOUNG_COLLECTION, *before[1:])
    await brokers[0].close()
    assert gc.get_threshold() == (YOUNG_COLLECTION, *before[1:])
    await brokers[1].close()
    assert gc.get_threshold() == before
