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
from bridge.node.recovery import SLICE
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
