"""The activation sequence in a node's own SQLite store (a replication pair without a lease):
raised at each activation, moved by a live node that goes on without its backup (its writer
then writes under the new one), and a newer sequence seen elsewhere, once recorded, makes
the store refuse the node's writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor

from bridge.ha.lock import Holder, LeaseToken
from bridge.store import Fenced, SQLiteMessageStore
from bridge.store.sequence import ActivationSequence
from tests.store.conftest import anycast, message


@pytest_twisted.ensureDeferred
async def test_the_sequence_rises_moves_and_a_newer_one_fences_the_writer(tmp_path: Path) -> None:
    sequence = ActivationSequence(tmp_path / "messages.sqlite", 0.5)
    me = Holder("a")
    try:
        assert sequence.read().epoch == 0
        taken = sequence.acquire(me, 5)
        assert taken is not None and (taken.holder, taken.epoch) == (str(me), 1)
        told: list[str] = []
        store = SQLiteMessageStore(
            tmp_path, reactor, token=LeaseToken(str(me), 1), fenced=lambda: told.append("x")
        )
        await store.open()
        await store.create_queue(anycast("orders"))

        await store.write_under(LeaseToken(str(me), 2))  # going on alone as sequence 2
        await store.add(message(1, "orders"), ["orders"])
        assert sequence.renew(me, 1, 5) is not None  # moved on by itself: still its own
        assert sequence.read().epoch == 2

        assert sequence.seen(3)  # a voter granted 3 to another node
        assert not sequence.seen(3)
        assert sequence.renew(me, 2, 5) is None
        with pytest.raises(Fenced, match="no longer carries epoch 2 of a/"):
            await store.add(message(2, "orders"), ["orders"])
        assert told == ["x"]
        with pytest.raises(Fenced):
            await store.write_under(LeaseToken(str(me), 4))
        await store.close()
        assert sequence.read().epoch == 3
    finally:
        sequence.close()


def test_a_release_clears_the_holder_and_keeps_the_sequence(tmp_path: Path) -> None:
    sequence = ActivationSequence(tmp_path / "messages.sqlite", 0.5)
    me = Holder("a")
    try:
        sequence.acquire(me, 5)
        assert sequence.release(Holder("b"), 1) is None
        assert sequence.release(me, 1) is not None
        row = sequence.read()
        assert (row.holder, row.epoch, row.held) == ("", 1, False)
        assert sequence.waiting(me, 5) == ()
    finally:
        sequence.close()
