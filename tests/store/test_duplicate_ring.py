"""The SQLite store's duplicate ids as rings of ``keep`` slots: one row per id stored,
none trimmed, and what the store recovers is the newest ``keep`` whatever the batches,
reopenings, changes of ``keep`` and rolled-back transactions."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.store.operations import (
    CommitTransaction,
    CreateQueue,
    DeleteQueue,
    StoreDuplicateId,
    WriterState,
)
from bridge.store.records import QueueRecord
from bridge.store.recovery import load
from bridge.store.schema import connect
from bridge.store.sqlite_operations import apply_all, load_state

ADDRESSES = ("a", "b")


class Writer:
    """The SQLite writer's statements on one file, without its thread: batches applied
    and committed, and the store reopened (its writer state read again) on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connection = connect(path, 1.0)
        self.state: WriterState = load_state(self.connection.cursor())

    def run(self, operations: list[object]) -> list[object]:
        cursor = self.connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        outcomes = apply_all(cursor, self.state, operations)  # type: ignore[arg-type]
        cursor.execute("COMMIT")
        return outcomes

    def reopen(self) -> None:
        self.connection.close()
        self.__init__(self.path)  # type: ignore[misc]

    def recovered(self) -> dict[str, list[bytes]]:
        cursor = self.connection.cursor()
        return dict(
            load(
                lambda statement: cursor.execute(statement).fetchall(),
                "rowid",
                lambda ids: {},
                load_limit=-1,
                highest_message_id=0,
                after_crash=False,
            ).duplicate_ids
        )

    def rows(self, address: str) -> int:
        (count,) = self.connection.execute(
            "SELECT count(*) FROM duplicate_ids WHERE address = ?", (address,)
        ).fetchone()
        return int(count)


def expected(stored: dict[str, list[bytes]]) -> dict[str, list[bytes]]:
    """What the model's rows recover: each id once, at its newest place."""
    recovered = {}
    for address, ids in stored.items():
        newest: dict[bytes, None] = {}
        for duplicate_id in ids:
            newest.pop(duplicate_id, None)
            newest[duplicate_id] = None
        if newest:
            recovered[address] = list(newest)
    return recovered


steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("store"),
            st.lists(
                st.tuples(st.sampled_from(ADDRESSES), st.binary(min_size=1, max_size=2)),
                min_size=1,
                max_size=40,
            ),
        ),
        st.tuples(st.just("keep"), st.integers(1, 12)),
        st.tuples(st.just("reopen"), st.none()),
        st.tuples(st.just("rolled back"), st.binary(min_size=1, max_size=2)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(steps, st.integers(1, 12))
def test_the_rings_recover_the_newest_ids_as_a_model_of_their_rows_does(
    tmp_path_factory, steps, keep
):
    """A model of each ring's rows (the newest ``keep`` ids stored; a change of ``keep``
    keeps the newest of the new size) against the store, after every step."""
    writer = Writer(tmp_path_factory.mktemp("ring") / "messages.sqlite")
    model: dict[str, list[bytes]] = {address: [] for address in ADDRESSES}
    for step, argument in steps:
        if step == "store":
            writer.run([StoreDuplicateId(address, key, keep) for address, key in argument])
            for address, key in argument:
                model[address] = (model[address] + [key])[-keep:]
        elif step == "keep":
            keep = argument
        elif step == "reopen":
            writer.reopen()
        else:  # a transaction storing an id, undone by the queue it fails to delete
            (outcome,) = writer.run(
                [CommitTransaction((StoreDuplicateId("a", argument, keep), DeleteQueue("nowhere")))]
            )
            assert outcome is not None
        for address in ADDRESSES:
            assert writer.rows(address) == len(model[address])
        assert writer.recovered() == expected(model)
    writer.connection.close()


def test_a_thousand_ids_leave_keep_rows(tmp_path: Path) -> None:
    """A ring's table holds ``keep`` rows however many ids went through it."""
    writer = Writer(tmp_path / "messages.sqlite")
    for start in range(0, 1000, 100):
        writer.run([StoreDuplicateId("a", b"%d" % n, 64) for n in range(start, start + 100)])
    assert writer.rows("a") == 64
    assert writer.recovered() == {"a": [b"%d" % n for n in range(936, 1000)]}


OLD_SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE store_state (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE queues (name TEXT NOT NULL UNIQUE, address TEXT NOT NULL,
    routing TEXT NOT NULL, filter TEXT);
CREATE TABLE messages (id INTEGER PRIMARY KEY, refs INTEGER NOT NULL, data BLOB NOT NULL,
    large INTEGER);
CREATE TABLE paged_messages (id INTEGER PRIMARY KEY, refs INTEGER NOT NULL,
    data BLOB NOT NULL);
CREATE TABLE message_refs (queue TEXT NOT NULL, message_id INTEGER NOT NULL,
    delivery_count INTEGER NOT NULL, PRIMARY KEY (queue, message_id)) WITHOUT ROWID;
CREATE TABLE duplicate_ids (seq INTEGER PRIMARY KEY AUTOINCREMENT, address TEXT NOT NULL,
    duplicate_id BLOB NOT NULL, UNIQUE (address, duplicate_id));
CREATE INDEX duplicate_ids_by_age ON duplicate_ids (address, seq);
CREATE TABLE live_lock (name TEXT PRIMARY KEY, holder TEXT NOT NULL, epoch INTEGER NOT NULL)
    WITHOUT ROWID;
INSERT INTO live_lock (name, holder, epoch) VALUES ('live', '', 0);
INSERT INTO store_state (key, value) VALUES ('highest_message_id', 0);
INSERT INTO store_state (key, value) VALUES ('clean_stop', 1);
INSERT INTO schema_version (version) VALUES (3);
"""


def test_a_version_3_store_keeps_its_ids_in_rings(tmp_path: Path) -> None:
    """Migrated, a store recovers the ids its version-3 table held, in order; the first
    id stored lays the ring out for its ``keep`` and the oldest beyond it go. The old
    table numbered the ids of every address in one sequence, and an id stored again
    took a new number: an address's numbers have gaps, which the ring does not keep."""
    path = tmp_path / "messages.sqlite"
    old = sqlite3.connect(path)
    old.executescript(OLD_SCHEMA)
    old.executemany(
        "INSERT OR REPLACE INTO duplicate_ids (address, duplicate_id) VALUES (?, ?)",
        [(address, b"%s%d" % (address.encode(), n)) for n in range(10) for address in "ab"]
        + [("a", b"a3")],
    )
    old.commit()
    old.close()
    writer = Writer(path)
    assert writer.connection.execute("SELECT version FROM schema_version").fetchone() == (4,)
    a = [b"a%d" % n for n in (0, 1, 2, 4, 5, 6, 7, 8, 9, 3)]
    b = [b"b%d" % n for n in range(10)]
    assert writer.recovered() == {"a": a, "b": b}
    writer.run([StoreDuplicateId("a", b"a10", 4), CreateQueue(QueueRecord("q", "q", "anycast"))])
    assert writer.rows("a") == 4
    assert writer.recovered() == {"a": [b"a8", b"a9", b"a3", b"a10"], "b": b}
    writer.run([StoreDuplicateId("b", b"b10", 7), StoreDuplicateId("a", b"a11", 4)])
    writer.reopen()
    assert writer.recovered() == {
        "a": [b"a9", b"a3", b"a10", b"a11"],
        "b": [b"b%d" % n for n in range(4, 11)],
    }
    assert (writer.rows("a"), writer.rows("b")) == (4, 7)
