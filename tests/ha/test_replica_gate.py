"""The lease with replication (``ReplicaGate``): only the node whose store is the latest,
or the backup the live node named in sync, may take it; a new pair's first live node is
its primary."""

from __future__ import annotations

import pytest

from bridge.ha.lease import LeaseTable
from bridge.ha.lock import Holder, ReplicaGate
from tests.ha.conftest import QUERY_TIMEOUT

REAP = 30.0


@pytest.fixture
def gated(lease_url, tables):
    made: list[LeaseTable] = []

    def make(node: str, *, primary: bool) -> LeaseTable:
        table = LeaseTable(lease_url, QUERY_TIMEOUT, gate=ReplicaGate(node, primary))
        made.append(table)
        return table

    yield make
    for table in made:
        table.close()


def test_a_new_pair_starts_on_its_primary(gated):
    backup = gated("b", primary=False)
    primary = gated("a", primary=True)
    assert backup.acquire(Holder("b"), REAP) is None, "a backup never starts a new pair"
    assert primary.acquire(Holder("a"), REAP) is not None
    assert primary.replica() == ("a", "")


def test_only_the_backup_named_in_sync_takes_over(gated):
    primary, backup = gated("a", primary=True), gated("b", primary=False)
    a, b = Holder("a"), Holder("b")
    row = primary.acquire(a, REAP)
    assert row is not None
    assert primary.release(a, row.epoch) is not None
    assert backup.acquire(b, REAP) is None, "b's copy is not in sync: it may not serve"

    row = primary.acquire(a, REAP)
    assert row is not None
    assert primary.mark_replica(a, row.epoch, str(b)) is not None
    assert primary.replica() == ("a", str(b))
    assert backup.acquire(b, REAP) is None, "a holds the lease still"
    assert backup.acquire(Holder("b"), 0.0) is None, "another run of b was not in sync"
    primary.release(a, row.epoch)
    taken = backup.acquire(b, REAP)
    assert taken is not None
    assert backup.replica() == ("b", ""), "the new live node's store is the latest"


def test_a_node_whose_store_is_stale_cannot_come_back_live(gated):
    primary, backup = gated("a", primary=True), gated("b", primary=False)
    a, b = Holder("a"), Holder("b")
    row = primary.acquire(a, REAP)
    primary.mark_replica(a, row.epoch, str(b))
    primary.release(a, row.epoch)
    row = backup.acquire(b, REAP)
    backup.release(b, row.epoch)
    assert primary.acquire(Holder("a"), REAP) is None, "b served last: a's store is stale"
    assert backup.acquire(Holder("b"), REAP) is not None, "b restarted has the latest store"


def test_only_the_holder_names_a_replica(gated):
    primary, backup = gated("a", primary=True), gated("b", primary=False)
    a, b = Holder("a"), Holder("b")
    row = primary.acquire(a, REAP)
    assert backup.mark_replica(b, row.epoch, str(b)) is None
    assert primary.mark_replica(a, row.epoch + 1, str(b)) is None
    assert primary.mark_replica(a, row.epoch, "") is not None
