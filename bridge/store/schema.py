"""The SQLite schema of the message store, its version, and opening a file with it.

Tables:

- ``schema_version``: one row, the schema version the data was written with.
- ``store_state``: named integers; ``highest_message_id`` lets ids keep increasing after
  every message was acknowledged; ``clean_stop`` is 1 when the store was closed, 0 while a
  node runs on it (absent in a store from before it: taken as 0).
- ``queues``: durable queue definitions, in creation order (rowid).
- ``messages``: each durable message once, encoded with ``bridge.message``, and ``refs``,
  the number of queues still holding it (the row goes when it reaches zero); ``large``
  is a large message's body size (its body is the file ``large-messages/ID.msg`` beside
  the database, its ``data`` the header), NULL for others.
- ``paged_messages``: non-durable messages (or durable ones on non-durable queues) that
  paging keeps on disk until queues read them back, with ``refs`` likewise; emptied when
  the store opens, as such messages do not outlive the node.
- ``message_refs``: which queue holds which message, with its delivery count.
- ``duplicate_ids``: each address's duplicate-detection ids as a ring of ``keep`` slots,
  as Artemis keeps its id cache: the id numbered ``seq`` (an address's ids are numbered
  in the order they are stored) takes slot ``seq % keep``, replacing the one ``keep``
  ids older, so an id costs one row written and none trimmed. ``seq`` orders them when
  the store opens.
- ``live_lock``: for nodes sharing the store's directory under ``[ha]``, the holder of
  the file lock and its epoch (:mod:`bridge.store.file_lock`), which every write of a
  live node checks; empty holder and epoch 0 where no node ever took it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bridge.store.errors import SchemaTooNew, StoreError

SCHEMA_VERSION = 4

_LIVE_LOCK = """
CREATE TABLE live_lock (
    name TEXT PRIMARY KEY, holder TEXT NOT NULL, epoch INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO live_lock (name, holder, epoch) VALUES ('live', '', 0);
"""

_DUPLICATE_IDS = """
CREATE TABLE {table} (
    address TEXT NOT NULL,
    slot INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    duplicate_id BLOB NOT NULL,
    PRIMARY KEY (address, slot)
) WITHOUT ROWID;
"""
"""The duplicate ids' table (version 4), under the name ``table``."""

SCHEMA = (
    """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE store_state (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE queues (
    name TEXT NOT NULL UNIQUE,
    address TEXT NOT NULL,
    routing TEXT NOT NULL CHECK (routing IN ('anycast', 'multicast')),
    filter TEXT
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY, refs INTEGER NOT NULL, data BLOB NOT NULL, large INTEGER
);
CREATE TABLE paged_messages (id INTEGER PRIMARY KEY, refs INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE message_refs (
    queue TEXT NOT NULL,
    message_id INTEGER NOT NULL,
    delivery_count INTEGER NOT NULL,
    PRIMARY KEY (queue, message_id)
) WITHOUT ROWID;
INSERT INTO store_state (key, value) VALUES ('highest_message_id', 0);
INSERT INTO store_state (key, value) VALUES ('clean_stop', 1);
"""
    + _DUPLICATE_IDS.format(table="duplicate_ids")
    + _LIVE_LOCK
)

PAGE_SIZE = 8192
"""SQLite's page size for a new store (SQLite's default is 4096). Each page a batch
changes is written to the WAL, and a checkpoint reads it back and writes it to the file:
through a bridge of 1 KiB messages, 4 KiB pages cost the sending node about 1.8 writes
and 1.1 reads per message. 8 KiB pages cost 0.7 and 0.35, and the bridge carries about 9%
more; single commits moved within their noise (docs/store.md, "Pages of 8 KiB"). 16 KiB
pages made single commits slower and the bridge no faster.

A store keeps the page size it was created with: in WAL mode SQLite changes it only
by a ``VACUUM`` out of WAL mode, which rewrites the whole file."""

CHECK_TOKEN = "SELECT 1 FROM live_lock WHERE name = :lease AND holder = :holder AND epoch = :epoch"
"""The fencing token's check, for a writer to run inside each write transaction: a row
only while the live lock still carries this holder and epoch."""


def connect(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """Open ``path`` (creating it and its directory if needed, with ``PAGE_SIZE`` pages) in
    WAL mode with full sync, with the schema created or checked. Transactions are explicit
    (autocommit off in SQLite's sense: every ``BEGIN`` is ours).

    ``temp_store=MEMORY`` keeps the statement journal of a savepoint (every batch's runs
    have one, to undo an invalid statement) in memory: in a file, each page a batch
    changes cost another write and each batch a file opened and unlinked.

    ``secure_delete=OFF``, SQLite's own default, which some builds (Debian's) turn on: on,
    every delete (each consumed message) overwrites the freed bytes with zeros, which cost
    the writer a tenth of its instructions per message and more pages written. A consumed
    message's bytes stay in free pages until they are reused, as in Artemis's journal
    files until they are compacted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=True
    )
    try:
        connection.execute("PRAGMA temp_store=MEMORY")
        # (before WAL mode: the first write fixes a new file's page size; none otherwise)
        connection.execute(f"PRAGMA page_size={PAGE_SIZE}")
        mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode != "wal":
            raise StoreError(f"{path}: SQLite refused WAL mode (journal mode is {mode!r})")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("PRAGMA secure_delete=OFF")
        _prepare(connection, path)
    except BaseException:
        connection.close()
        raise
    return connection


def _prepare(connection: sqlite3.Connection, path: Path) -> None:
    connection.execute("BEGIN IMMEDIATE")
    try:
        found = connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        if found is None:
            _create(connection, path)
        else:
            _check_version(connection, path)
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def _create(connection: sqlite3.Connection, path: Path) -> None:
    others = connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if others:
        raise StoreError(f"{path} is an SQLite database but not a txbridge message store")
    _statements(connection, SCHEMA)
    connection.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))


def _check_version(connection: sqlite3.Connection, path: Path) -> None:
    row = connection.execute("SELECT version FROM schema_version").fetchone()
    if row is None:
        raise StoreError(f"{path}: the schema_version table is empty")
    version = row[0]
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"{path} holds message store schema version {version}, written by a newer "
            f"txbridge; this one reads versions up to {SCHEMA_VERSION}"
        )
    if version == 1:
        _migrate_1_to_2(connection)
        version = 2
    if version == 2:
        _migrate_2_to_3(connection)
        version = 3
    if version == 3:
        _migrate_3_to_4(connection)
        version = 4
    if version < SCHEMA_VERSION:
        raise StoreError(
            f"{path} holds message store schema version {version}, which no migration "
            f"brings to version {SCHEMA_VERSION}"
        )


def _migrate_1_to_2(connection: sqlite3.Connection) -> None:
    """Version 2 adds large messages (a column) and paging (a table)."""
    connection.execute("ALTER TABLE messages ADD COLUMN large INTEGER")
    connection.execute(
        "CREATE TABLE paged_messages"
        " (id INTEGER PRIMARY KEY, refs INTEGER NOT NULL, data BLOB NOT NULL)"
    )
    connection.execute("UPDATE schema_version SET version = 2")


def _migrate_2_to_3(connection: sqlite3.Connection) -> None:
    """Version 3 adds the live lock's epoch, for nodes sharing the store under [ha]."""
    _statements(connection, _LIVE_LOCK)
    connection.execute("UPDATE schema_version SET version = 3")


def _migrate_3_to_4(connection: sqlite3.Connection) -> None:
    """Version 4 keeps duplicate ids in rings. Each id keeps its number; its slot is
    minus its number, which no ring gives, so the writer lays each address's ring out
    afresh the first time it stores an id there, when it knows the ``keep``."""
    _statements(
        connection,
        _DUPLICATE_IDS.format(table="duplicate_ids_ring")
        + """
INSERT INTO duplicate_ids_ring (address, slot, seq, duplicate_id)
    SELECT address, -seq, seq, duplicate_id FROM duplicate_ids;
DROP TABLE duplicate_ids;
ALTER TABLE duplicate_ids_ring RENAME TO duplicate_ids;
UPDATE schema_version SET version = 4
""",
    )


def _statements(connection: sqlite3.Connection, script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            connection.execute(statement)
